"""DNS that cannot hotspot: required anti-affinity, a bounded proportional autoscaler, NodeLocal DNS."""

from __future__ import annotations

import json

import pytest

from infra.addons import coredns, node_local_dns
from infra.addons.k8s import pod_templates
from infra.cluster.whole_cluster import tolerates
from infra.config.cluster_config import Taint
from infra.config.errors import ConfigError
from infra.facts.labels import ROLE_SYSTEM, SYSTEM_TAINT_EFFECT, SYSTEM_TAINT_KEY, SYSTEM_TAINT_VALUE
from tests.infra.addon_fixtures import all_objects, find, groups_for, spec_for


def test_coredns_anti_affinity_is_required_on_hostname_not_preferred():
    pod = find(groups_for("prod"), "Deployment", "coredns")["spec"]["template"]["spec"]
    anti = pod["affinity"]["podAntiAffinity"]
    assert "preferredDuringSchedulingIgnoredDuringExecution" not in anti
    (term,) = anti["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchExpressions"] == [{"key": "k8s-app", "operator": "In", "values": ["kube-dns"]}]
    template_labels = find(groups_for("prod"), "Deployment", "coredns")["spec"]["template"]["metadata"]["labels"]
    assert template_labels["k8s-app"] == "kube-dns", "the anti-affinity must select CoreDNS's own pods"


def test_coredns_rollout_never_needs_two_pods_on_a_node():
    strategy = find(groups_for(), "Deployment", "coredns")["spec"]["strategy"]
    assert strategy["rollingUpdate"]["maxSurge"] == 0


def test_coredns_replica_count_is_left_to_the_proportional_autoscaler():
    assert "replicas" not in find(groups_for(), "Deployment", "coredns")["spec"]


def test_coredns_stays_off_the_system_pools():
    """CoreDNS runs on the CPU pools, never on the system pools (a decision, kept here): with its required
    anti-affinity each replica needs a node of its own, and prod's system pool holds at most 20 nodes
    against CoreDNS's 64-replica ceiling, so the rest would wait forever and hold the autoscaler's system
    pool at its maximum; the 2,500-node post's per-VM lookup limit wants DNS spread over many VMs; and a
    system-pool outage would take cluster DNS down with monitoring and the autoscaler. Tolerating the
    system taint would also let the bin-packing scheduler put replicas there first (the most allocated
    nodes). So a cluster needs an untainted CPU pool, which the whole-cluster check demands
    (tests/infra/test_whole_cluster.py, "system add-ons with no node")."""
    spec = spec_for("prod")
    (system_pool,) = [pool for pool in spec.config.node_pools if pool.role == ROLE_SYSTEM]
    assert system_pool.max_nodes < spec.addons.coredns.max_replicas
    pod = find(groups_for("prod"), "Deployment", "coredns")["spec"]["template"]["spec"]
    system_taint = Taint(SYSTEM_TAINT_KEY, SYSTEM_TAINT_VALUE, SYSTEM_TAINT_EFFECT)
    assert not any(tolerates(toleration, system_taint) for toleration in pod["tolerations"])


def test_proportional_autoscaler_has_an_explicit_maximum():
    groups = groups_for("prod", addons={"coredns": {"maxReplicas": 40, "minReplicas": 3}})
    params = json.loads(find(groups, "ConfigMap", "dns-autoscaler")["data"]["linear"])
    assert params["max"] == 40 and params["min"] == 3
    # Without the cap, 7,500 nodes / 16 per replica would ask for 469 replicas.
    assert params["nodesPerReplica"] == 16
    command = find(groups, "Deployment", "dns-autoscaler")["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--target=deployment/coredns" in command and "--configmap=dns-autoscaler" in command


def test_kube_dns_service_takes_the_planned_dns_ip():
    spec = spec_for("prod")
    service = find(groups_for("prod"), "Service", "kube-dns")
    assert service["spec"]["clusterIP"] == spec.addresses.dns_service_ip == "172.20.0.10"


def test_coredns_memory_follows_the_5000_node_scale_job():
    def limit(stack):
        pod = find(groups_for(stack), "Deployment", "coredns")["spec"]["template"]["spec"]
        return pod["containers"][0]["resources"]["limits"]["memory"]

    assert limit("prod") == "340Mi" and limit("dev") == "170Mi"


def test_corefiles_forward_external_names_to_the_nodes_upstream_resolvers():
    assert "forward . /etc/upstream-dns/resolv.conf {" in coredns.corefile()
    assert "kubernetes cluster.local in-addr.arpa ip6.arpa {" in coredns.corefile()
    local = node_local_dns.corefile("169.254.20.10", "172.20.0.10")
    assert local.count("bind 169.254.20.10 172.20.0.10") == 4
    assert "forward . /etc/upstream-dns/resolv.conf\n" in local
    assert "force_tcp" in local and "health 169.254.20.10:8080" in local


def test_node_local_dns_listens_on_the_local_ip_and_the_service_ip():
    spec = spec_for("prod")
    daemon = find(groups_for("prod"), "DaemonSet", "node-local-dns")
    args = daemon["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("-localip") + 1] == f"169.254.20.10,{spec.addresses.dns_service_ip}"
    assert args[args.index("-upstreamsvc") + 1] == "kube-dns-upstream"


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_node_cache_serves_its_own_metrics_on_the_nodes_loopback_only(stack):
    """node-cache's -metrics-listen-address defaults to 0.0.0.0:9353 (k8s.io/dns cmd/node-cache/main.go; the
    flag's name checked there, node-cache is not built here, so this reads the rendered arguments): on the host
    network every pod reached it. Today's design rendered no such flag and failed here. Loopback is the node's
    own, which no pod's network namespace shares; no container port is declared for it, as nothing scrapes it."""
    (container,) = find(groups_for(stack), "DaemonSet", node_local_dns.NAME)["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    flags = {args[i]: args[i + 1] for i in range(0, len(args), 2)}
    host, _, port = flags["-metrics-listen-address"].rpartition(":")
    assert (host, port) == ("127.0.0.1", "9353")
    assert int(port) not in {p["containerPort"] for p in container["ports"]}


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_node_local_dns_runs_on_a_read_only_root_with_only_the_capabilities_node_cache_uses(stack):
    """node-cache (k8s.io/dns cmd/node-cache) binds port 53 (NET_BIND_SERVICE), adds its interface's addresses
    over netlink and its NOTRACK/ACCEPT rules through iptables-nft (NET_ADMIN), and writes one file: the Corefile
    it derives from the base one (``-conf``). That file is on an emptyDir; nothing else it mounts is writable
    but the host's xtables lock."""
    pod = find(groups_for(stack), "DaemonSet", node_local_dns.NAME)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False and not context.get("privileged")
    assert context["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN", "NET_BIND_SERVICE"]}
    args = container["args"]
    flags = {args[i]: args[i + 1] for i in range(0, len(args), 2)}
    volumes = {v["name"]: v for v in pod["volumes"]}
    writable = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"] if not m.get("readOnly")}
    assert {path: sorted(v) for path, v in writable.items()} == {
        "/run/xtables.lock": ["hostPath", "name"],
        node_local_dns.RUNTIME_DIR: ["emptyDir", "name"],
    }
    assert flags["-conf"].startswith(node_local_dns.RUNTIME_DIR + "/")
    # The base Corefile it reads is the ConfigMap's, mounted read-only.
    base_dir, _, base_name = flags["-basecorefile"].rpartition("/")
    (config,) = [m for m in container["volumeMounts"] if m["mountPath"] == base_dir]
    assert config["readOnly"] is True and volumes[config["name"]]["configMap"]["items"][0]["path"] == base_name


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_host_network_pod_resolves_cluster_names(stack):
    objects = all_objects(groups_for(stack, addons={"balloons": {"headroomNodes": {"cpu": 1}}}))
    host_network = [(w, pod) for w, pod in pod_templates(objects) if pod.get("hostNetwork")]
    assert {w["metadata"]["name"] for w, _ in host_network} >= {
        "node-local-dns",
        "iptables-exporter",
        "cluster-autoscaler",
    }
    for workload, pod in host_network:
        assert pod["dnsPolicy"] == "ClusterFirstWithHostNet", workload["metadata"]["name"]


@pytest.mark.parametrize(
    "settings,key",
    [
        ({"coredns": {"maxReplicas": 1, "minReplicas": 2}}, "addons.coredns.maxReplicas = 1"),
        ({"coredns": {"maxReplica": 5}}, "addons.coredns.maxReplica = 5"),
        ({"nodeLocalDns": {"localIp": "10.0.0.10"}}, "addons.nodeLocalDns.localIp = '10.0.0.10'"),
        ({"coredns": {"enabled": False}}, "addons.nodeLocalDns.enabled = True"),
    ],
)
def test_bad_dns_settings_name_the_key(settings, key):
    with pytest.raises(ConfigError) as caught:
        spec_for("dev", addons=settings)
    assert key in str(caught.value)
