"""The data plane on real nodes: pods started by the real kubelet, containerd and runc, holding the
addresses Azure CNI would give them, talking through the rendered rules, kube-proxy and DNS.

Each test reads what a packet did (who a server saw, which counters moved) or what the kernel holds for a
container, never the rendered text.
"""

from __future__ import annotations

import ipaddress
import json
import re
import uuid

import pytest
import yaml

from infra.addons import coredns
from infra.addons.shared_names import SYSTEM_NAMESPACE
from infra.facts.labels import HOSTNAME_LABEL
from infra.network.addressing import CLUSTER_DOMAIN
from infra.network.traffic_counters import COMMENT_PREFIX
from infra.node import install
from infra.node.cni import IMDS_IP, IMDS_PORT, WIRESERVER_BLOCKED_TCP_PORTS, WIRESERVER_IP
from tests.e2e.cluster import Cluster, boot
from tests.e2e.dns import EXTERNAL_ADDRESS, EXTERNAL_NAME, rendered_node_local_dns
from tests.e2e.hosts import wait_for
from tests.e2e.runtime import BOX_EVICTION_HARD, INTERNET_HOST, OUTSIDE_PORT, PRIVATE_PEER, RealNode

pytestmark = pytest.mark.e2e

NAMESPACE = "default"
PROBE_PORT = 8080
PROBE = "/probe"
TEST_LABEL = "data-plane-test"  # on every pod and Service a test creates (the key alone)


@pytest.fixture(scope="module")
def box(binaries, tmp_path_factory) -> Cluster:
    # Two nodes of each pool (CoreDNS's replicas need two nodes to spread over) and the NAT host, all real.
    cluster = boot("dev", tmp_path_factory.mktemp("dataplane"), binaries, nodes_per_pool=2, real_nodes=True)
    yield cluster
    cluster.close()


@pytest.fixture(autouse=True)
def _delete_test_pods(box: Cluster):
    """Each test's pods and Services go when it ends (without waiting): a node's pod slots are few (a dev
    GPU node has one left after its DaemonSets), and a later test must not find an earlier test's pods."""
    yield
    box.kubectl("delete", "pods,services", "-n", NAMESPACE, "-l", TEST_LABEL, "--wait=false", check=False)


def _real(cluster: Cluster, pool: str | None, index: int = 0) -> RealNode:
    return [n for n in cluster.real_nodes if _pool_of(cluster, n) == pool][index]


def _pool_of(cluster: Cluster, node: RealNode) -> str | None:
    return next(n.pool for n in cluster.nodes if n.machine.name == node.machine.name)


def run_probe_pod(cluster: Cluster, node: RealNode, labels: dict[str, str] | None = None) -> tuple[str, str]:
    """A tenant pod serving the probe on ``node``; returns ``(name, pod IP)`` once it runs. It is placed as a
    tenant may place it, by the node's hostname label through the scheduler: the tenant admission policy
    refuses ``spec.nodeName`` and tolerating every taint in a tenant namespace (docs/security.md)."""
    name = f"probe-{uuid.uuid4().hex[:6]}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {TEST_LABEL: "", **(labels or {})}},
        "spec": {
            "nodeSelector": {HOSTNAME_LABEL: node.machine.name},
            "containers": [
                {
                    "name": "probe",
                    "image": cluster.box_images.probe.reference,
                    "imagePullPolicy": "IfNotPresent",
                    "args": ["serve", str(PROBE_PORT)],
                }
            ],
        },
    }
    cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(pod))

    def running():
        status = cluster.get_json("pod", "-n", NAMESPACE, name)["status"]
        return status.get("podIP") if status.get("phase") == "Running" else None

    ip = wait_for(f"pod {name} to run on {node.machine.name}", running, timeout=120, on_timeout=cluster.describe)
    return name, ip


def probe(cluster: Cluster, pod: str, *args: str, check: bool = True) -> str:
    result = cluster.kubectl("exec", "-n", NAMESPACE, pod, "--", PROBE, *args, check=check, timeout=30)
    return result.stdout if result.returncode == 0 else ""


def resolve(cluster: Cluster, pod: str, name: str, *server: str) -> list[str]:
    """The addresses ``name`` resolves to from ``pod`` (through its resolv.conf, or at ``server``), asked until
    an answer comes, for at most a minute. The probe gives one lookup 3 s, and on this 2-core machine, under the
    whole box, one lost or late datagram on a path just made (a fresh CoreDNS replica's first forward to Azure's
    DNS) fails a single try (CI of stop 38); a resolver that never answers still fails, with the probe's reason."""
    answer = wait_for(
        f"{name} to resolve from {pod} through {server[0] if server else 'its resolv.conf'}",
        lambda: probe(cluster, pod, "lookup", name, *server, check=False),
        timeout=60,
        interval=1,
        # The probe's own error first: it names the resolver the pod asked.
        on_timeout=lambda: _probe_error(cluster, pod, "lookup", name, *server) + cluster.describe(),
    )
    return answer.split()


def _probe_error(cluster: Cluster, pod: str, *args: str) -> str:
    """What the probe says when ``args`` fail (its reason, e.g. the resolver that gave no answer)."""
    return cluster.kubectl("exec", "-n", NAMESPACE, pod, "--", PROBE, *args, check=False, timeout=30).stderr


def test_pods_hold_their_nodes_nic_addresses_and_reach_each_other_across_nodes_unnatted(box: Cluster):
    # Two nodes of the untainted CPU pool: a tenant pod may not tolerate the GPU nodes' start-up taint,
    # which no health check lifts in this box (docs/cluster-in-a-box.md).
    first, second = _real(box, "cpu", 0), _real(box, "cpu", 1)
    server, server_ip = run_probe_pod(box, first)
    client, client_ip = run_probe_pod(box, second)
    assert server_ip in first.pod_ips and client_ip in second.pod_ips
    answer = probe(box, client, "send", f"{server_ip}:{PROBE_PORT}", "1000")
    assert answer.split() == ["from", client_ip, "bytes", "1000"], answer


def test_a_tenant_pod_cannot_reach_the_metadata_service_or_wireserver_but_its_node_can(box: Cluster):
    cpu = _real(box, "cpu")
    client, _ = run_probe_pod(box, cpu)
    blocked = [f"{IMDS_IP}:{IMDS_PORT}", *(f"{WIRESERVER_IP}:{port}" for port in WIRESERVER_BLOCKED_TCP_PORTS)]
    for target in blocked:
        assert probe(box, client, "send", target, "1", check=False) == "", f"a pod reached {target}"
        # Any answer: the probe's from WireServer's ports, an HTTP one (a 400 to the probe's byte) from IMDS's.
        answer = box.network.run(cpu.host, ["/usr/local/bin/probe", "send", target, "1"]).stdout
        assert answer.strip(), f"the node could not reach {target}"


def _service(cluster: Cluster, name: str, selector: dict[str, str]) -> str:
    """A ClusterIP Service on port 80 to the probe's port of the pods ``selector`` picks; returns its ClusterIP."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {TEST_LABEL: ""}},
        "spec": {"selector": selector, "ports": [{"port": 80, "targetPort": PROBE_PORT}]},
    }
    cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(service))
    return cluster.get_json("service", "-n", NAMESPACE, name)["spec"]["clusterIP"]


def test_a_cluster_ip_service_is_reached_from_a_pod_on_another_node_through_kube_proxys_nftables(box: Cluster):
    server_node, client_node = _real(box, "cpu", 0), _real(box, "cpu", 1)
    app = f"svc-{uuid.uuid4().hex[:6]}"
    run_probe_pod(box, server_node, {"app": app})
    client, client_ip = run_probe_pod(box, client_node)
    cluster_ip = _service(box, app, {"app": app})
    assert ipaddress.ip_address(cluster_ip) in box.spec.config.network.service_cidr
    answer = wait_for(
        f"{client} to reach Service {app} at {cluster_ip}:80",
        lambda: probe(box, client, "send", f"{cluster_ip}:80", "10", check=False),
        timeout=60,
        interval=1,
        on_timeout=box.describe,
    )
    # The server sees the client pod's own address: kube-proxy translated the destination only.
    assert answer.split() == ["from", client_ip, "bytes", "10"], answer
    # The translation is the nftables proxier's: the client's node holds the ClusterIP in kube-proxy's table.
    table = box.network.run(client_node.host, ["nft", "list", "table", "ip", "kube-proxy"], check=False)
    assert cluster_ip in table.stdout, f"{client_node.host.name}: no nftables kube-proxy rule for {cluster_ip}"


def _running_coredns(cluster: Cluster, count: int) -> list[dict]:
    """CoreDNS's running pods once there are ``count`` of them (else nothing)."""
    selector = ",".join(f"{k}={v}" for k, v in coredns.SELECTOR.items())
    pods = cluster.get_json("pods", "-n", SYSTEM_NAMESPACE, "-l", selector)["items"]
    running = [
        p for p in pods if p["status"].get("phase") == "Running" and p["metadata"].get("deletionTimestamp") is None
    ]
    return running if len(running) >= count else []


def test_a_pod_resolves_services_through_node_local_dns_then_coredns_and_external_names_through_azure_dns(
    box: Cluster,
):
    app = f"dns-{uuid.uuid4().hex[:6]}"
    run_probe_pod(box, _real(box, "cpu", 0), {"app": app})
    cluster_ip = _service(box, app, {"app": app})
    client, _ = run_probe_pod(box, _real(box, "cpu", 1))
    name = f"{app}.{NAMESPACE}.svc.{CLUSTER_DOMAIN}"
    link_local = rendered_node_local_dns(box.plan).local_ips[0]
    assert ipaddress.ip_address(link_local).is_link_local
    # Through the pod's resolv.conf (kubelet's rendered clusterDNS), then at NodeLocal DNS's link-local address.
    for server in ((), (link_local,)):
        assert resolve(box, client, name, *server) == [cluster_ip]
        assert resolve(box, client, EXTERNAL_NAME, *server) == [EXTERNAL_ADDRESS]


def test_coredns_replicas_run_on_nodes_of_their_own_and_each_answers_with_the_rendered_corefile(box: Cluster):
    # dns-autoscaler sets the replicas on Azure; its image is not in the box, so the test scales as it would.
    before = box.get_json("deployment", "-n", SYSTEM_NAMESPACE, coredns.NAME)["spec"]["replicas"]
    box.kubectl("scale", "deployment", "-n", SYSTEM_NAMESPACE, coredns.NAME, "--replicas=2")
    try:
        running = wait_for(
            "two CoreDNS replicas to run",
            lambda: _running_coredns(box, 2),
            timeout=120,
            interval=1,
            on_timeout=box.describe,
        )
        nodes = [p["spec"]["nodeName"] for p in running]
        assert len(set(nodes)) == len(nodes), f"CoreDNS replicas share a node: {nodes}"
        client, _ = run_probe_pod(box, _real(box, "cpu", 0))
        kubernetes = f"kubernetes.default.svc.{CLUSTER_DOMAIN}"
        service_ip = box.get_json("service", "-n", "default", "kubernetes")["spec"]["clusterIP"]
        for pod in running:
            ip = pod["status"]["podIP"]
            assert resolve(box, client, kubernetes, ip) == [service_ip], pod["metadata"]["name"]
            # Names outside the cluster: forwarded to the node's upstream, Azure's DNS.
            assert resolve(box, client, EXTERNAL_NAME, ip) == [EXTERNAL_ADDRESS], pod["metadata"]["name"]
    finally:
        box.kubectl("scale", "deployment", "-n", SYSTEM_NAMESPACE, coredns.NAME, f"--replicas={before}")


def _accounted_bytes(cluster: Cluster, node: RealNode) -> dict[str, int]:
    """Bytes each traffic class's forward rules counted on ``node`` (``{"internet-out": n, ...}``)."""
    saved = cluster.network.run(node.host, ["iptables-save", "-c", "-t", "mangle"]).stdout
    totals: dict[str, int] = {}
    for line in saved.splitlines():
        match = re.match(r"\[\d+:(\d+)\] -A SUPERCLUSTER-ACCT-FWD-\S+ .*traffic=([a-z-]+)", line)
        if match and COMMENT_PREFIX in line:
            totals[match[2]] = totals.get(match[2], 0) + int(match[1])
    return totals


def test_traffic_accounting_counts_a_pods_bytes_in_the_class_of_where_they_went(box: Cluster):
    node = _real(box, "cpu", 0)
    client, _ = run_probe_pod(box, node)
    _, peer_ip = run_probe_pod(box, _real(box, "cpu", 1))
    sent = 200_000
    for traffic, target in (
        ("cluster-out", f"{peer_ip}:{PROBE_PORT}"),
        ("private-out", f"{PRIVATE_PEER}:{OUTSIDE_PORT}"),
        ("internet-out", f"{INTERNET_HOST}:{OUTSIDE_PORT}"),
    ):
        before = _accounted_bytes(box, node)
        answer = probe(box, client, "send", target, str(sent))
        assert answer.split()[-1] == str(sent), answer
        after = _accounted_bytes(box, node)
        moved = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        # The payload plus TCP/IP headers (a few percent), and nothing of it in another class's "out"
        # (the replies' acknowledgements come back to the pod, a cluster address, and are a few KiB).
        assert sent <= moved.get(traffic, 0) <= sent * 1.1, (traffic, moved)
        others = {k: v for k, v in moved.items() if k.endswith("-out") and k != traffic}
        assert all(v < sent / 10 for v in others.values()), (traffic, moved)


def test_a_tenant_container_that_names_no_seccomp_profile_runs_under_the_runtimes_default_filter(box: Cluster):
    # kubelet's seccompDefault (infra/node/seccomp.py): containerd writes its RuntimeDefault profile into the
    # container's spec and runc installs it; the kernel reports the process in filter mode (Seccomp: 2).
    cpu = _real(box, "cpu")
    name, _ = run_probe_pod(box, cpu)
    uid = box.get_json("pod", "-n", NAMESPACE, name)["metadata"]["uid"]
    ctr = [f"{install.BIN}/ctr", "--namespace", "k8s.io"]
    labels = f'labels."io.cri-containerd.kind"==container,labels."io.kubernetes.pod.uid"=={uid}'
    (container,) = box.network.run(cpu.host, [*ctr, "containers", "ls", "--quiet", labels]).stdout.split()
    spec = json.loads(box.network.run(cpu.host, [*ctr, "containers", "info", container]).stdout)["Spec"]
    assert spec["linux"]["seccomp"]["defaultAction"] == "SCMP_ACT_ERRNO"  # an allowlist: RuntimeDefault
    tasks = box.network.run(cpu.host, [*ctr, "tasks", "ls"]).stdout.splitlines()
    (pid,) = [line.split()[1] for line in tasks if line.split()[:1] == [container]]
    status = box.network.run(cpu.host, ["cat", f"/proc/{pid}/status"]).stdout
    assert re.search(r"^Seccomp:\s+2$", status, re.M), status


def test_no_real_node_evicts_for_the_machines_shared_disk(box: Cluster):
    # Last in the module, so it also sees pressure that built up while the others ran. Each kubelet runs
    # with the box's absolute disk thresholds (tests/e2e/runtime.py, BOX_EVICTION_HARD, read back from its
    # live configuration), and no node reports a pressure condition: with kubelet's percentages, a
    # machine short of free disk put every node under DiskPressure and this module's pods stayed Pending.
    for node in box.real_nodes:
        name = node.machine.name
        live = json.loads(box.kubectl("get", "--raw", f"/api/v1/nodes/{name}/proxy/configz").stdout)
        assert live["kubeletconfig"]["evictionHard"] == BOX_EVICTION_HARD, name
        conditions = box.get_json("node", name)["status"]["conditions"]
        pressure = [c["type"] for c in conditions if c["type"].endswith("Pressure") and c["status"] == "True"]
        assert not pressure, f"{name} reports {pressure}"
