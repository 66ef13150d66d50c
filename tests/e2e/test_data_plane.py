"""The data plane on real nodes: pods started by the real kubelet, containerd and runc, holding the
addresses Azure CNI would give them, talking through the rendered rules and kube-proxy.

Each test reads what a packet did (who a server saw, which counters moved), never the rendered text.
"""

from __future__ import annotations

import ipaddress
import re
import uuid

import pytest
import yaml

from infra.addons import coredns
from infra.addons.labels import SYSTEM_NAMESPACE
from infra.addressing import CLUSTER_DOMAIN
from infra.node.cni import IMDS_IP, WIRESERVER_BLOCKED_TCP_PORTS, WIRESERVER_IP
from infra.traffic_accounting import COMMENT_PREFIX
from tests.e2e.cluster import Cluster, boot
from tests.e2e.dns import EXTERNAL_ADDRESS, EXTERNAL_NAME, rendered_node_local_dns
from tests.e2e.hosts import wait_for
from tests.e2e.runtime import INTERNET_HOST, OUTSIDE_PORT, PRIVATE_PEER, RealNode

pytestmark = pytest.mark.e2e

NAMESPACE = "default"
PROBE_PORT = 8080
PROBE = "/probe"


@pytest.fixture(scope="module")
def box(binaries, tmp_path_factory) -> Cluster:
    # Two nodes of each pool (CoreDNS's replicas need two nodes to spread over) and the NAT host, all real.
    cluster = boot("dev", tmp_path_factory.mktemp("dataplane"), binaries, nodes_per_pool=2, real_nodes=True)
    yield cluster
    cluster.close()


def _real(cluster: Cluster, pool: str | None, index: int = 0) -> RealNode:
    return [n for n in cluster.real_nodes if _pool_of(cluster, n) == pool][index]


def _pool_of(cluster: Cluster, node: RealNode) -> str | None:
    return next(n.pool for n in cluster.nodes if n.machine.name == node.machine.name)


def run_probe_pod(cluster: Cluster, node: RealNode, labels: dict[str, str] | None = None) -> tuple[str, str]:
    """A pod serving the probe on ``node`` (placed there by name); returns ``(name, pod IP)`` once it runs."""
    name = f"probe-{uuid.uuid4().hex[:6]}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels or {}},
        "spec": {
            "nodeName": node.machine.name,
            "tolerations": [{"operator": "Exists"}],
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


def test_pods_hold_their_nodes_nic_addresses_and_reach_each_other_across_nodes_unnatted(box: Cluster):
    gpu, cpu = _real(box, "gpu"), _real(box, "cpu")
    server, server_ip = run_probe_pod(box, gpu)
    client, client_ip = run_probe_pod(box, cpu)
    assert server_ip in gpu.pod_ips and client_ip in cpu.pod_ips
    answer = probe(box, client, "send", f"{server_ip}:{PROBE_PORT}", "1000")
    assert answer.split() == ["from", client_ip, "bytes", "1000"], answer


def test_a_cluster_ip_service_is_reached_from_a_pod_through_kube_proxy(box: Cluster):
    gpu, cpu = _real(box, "gpu"), _real(box, "cpu")
    app = f"svc-{uuid.uuid4().hex[:6]}"
    _, server_ip = run_probe_pod(box, gpu, {"app": app})
    client, client_ip = run_probe_pod(box, cpu)
    cluster_ip = _service(box, app, {"app": app})
    assert ipaddress.ip_address(cluster_ip) in box.spec.config.network.service_cidr
    answer = wait_for(
        f"{client} to reach {app} at {cluster_ip}:80",
        lambda: probe(box, client, "send", f"{cluster_ip}:80", "10", check=False),
        timeout=60,
        interval=1,
    )
    assert answer.split() == ["from", client_ip, "bytes", "10"], answer


def test_a_tenant_pod_cannot_reach_the_metadata_service_or_wireserver_but_its_node_can(box: Cluster):
    cpu = _real(box, "cpu")
    client, _ = run_probe_pod(box, cpu)
    blocked = [f"{IMDS_IP}:80", *(f"{WIRESERVER_IP}:{port}" for port in WIRESERVER_BLOCKED_TCP_PORTS)]
    for target in blocked:
        assert probe(box, client, "send", target, "1", check=False) == "", f"a pod reached {target}"
        answer = box.network.run(cpu.host, ["/usr/local/bin/probe", "send", target, "1"]).stdout
        assert answer.split()[:1] == ["from"], f"the node could not reach {target}: {answer}"


def _service(cluster: Cluster, name: str, selector: dict[str, str]) -> str:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"selector": selector, "ports": [{"port": 80, "targetPort": PROBE_PORT}]},
    }
    cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(service))
    return cluster.get_json("service", "-n", NAMESPACE, name)["spec"]["clusterIP"]


def test_dns_names_resolve_through_node_local_dns_then_coredns_and_external_names_through_azure_dns(box: Cluster):
    # CoreDNS answers the cluster names: its replicas (the dns-autoscaler's image is not in the box, so
    # the test scales it) run, each on a node of its own under the rendered anti-affinity.
    box.kubectl("scale", "-n", SYSTEM_NAMESPACE, f"deployment/{coredns.NAME}", "--replicas=2")
    selector = ",".join(f"{k}={v}" for k, v in coredns.SELECTOR.items())

    def running_replicas():
        pods = box.get_json("pods", "-n", SYSTEM_NAMESPACE, "-l", selector)["items"]
        running = [p["spec"]["nodeName"] for p in pods if p["status"].get("phase") == "Running"]
        return running if len(running) == 2 else None

    nodes = wait_for("two CoreDNS replicas to run", running_replicas, timeout=120, on_timeout=box.describe)
    assert len(set(nodes)) == 2, nodes
    cpu = _real(box, "cpu")
    app = f"dns-{uuid.uuid4().hex[:6]}"
    run_probe_pod(box, _real(box, "gpu"), {"app": app})
    cluster_ip = _service(box, app, {"app": app})
    client, _ = run_probe_pod(box, cpu)
    name = f"{app}.{NAMESPACE}.svc.{CLUSTER_DOMAIN}"
    node_local = rendered_node_local_dns(box.plan)
    link_local = node_local.local_ips[0]
    assert ipaddress.ip_address(link_local).is_link_local
    # Through the pod's resolv.conf (kubelet's clusterDNS) and at NodeLocal DNS's link-local address.
    for server in ((), (link_local,)):
        answer = wait_for(
            f"{name} to resolve from {client} {server}",
            lambda server=server: probe(box, client, "lookup", name, *server, check=False),
            timeout=60,
            interval=1,
            on_timeout=box.describe,
        )
        assert answer.split() == [cluster_ip], answer
        assert probe(box, client, "lookup", EXTERNAL_NAME, *server).split() == [EXTERNAL_ADDRESS]


def _accounted_bytes(cluster: Cluster, node: RealNode) -> dict[str, int]:
    """Bytes each traffic class's forward rules counted on ``node`` (``{"internet-out": n, ...}``)."""
    saved = cluster.network.run(node.host, ["iptables-save", "-c", "-t", "mangle"]).stdout
    totals: dict[str, int] = {}
    for line in saved.splitlines():
        match = re.match(r"\[\d+:(\d+)\] -A SUPERCLUSTER-ACCT-FWD-\S+ .*traffic=(\S+)\"", line)
        if match and COMMENT_PREFIX in line:
            totals[match[2]] = totals.get(match[2], 0) + int(match[1])
    return totals


def test_traffic_accounting_counts_a_pods_bytes_in_the_right_class(box: Cluster):
    cpu = _real(box, "cpu")
    client, _ = run_probe_pod(box, cpu)
    _, peer_ip = run_probe_pod(box, _real(box, "gpu"))
    sent = 200_000
    for traffic, target in (
        ("cluster-out", f"{peer_ip}:{PROBE_PORT}"),
        ("private-out", f"{PRIVATE_PEER}:{OUTSIDE_PORT}"),
        ("internet-out", f"{INTERNET_HOST}:{OUTSIDE_PORT}"),
    ):
        before = _accounted_bytes(box, cpu)
        assert probe(box, client, "send", target, str(sent)).split()[-1] == str(sent)
        after = _accounted_bytes(box, cpu)
        moved = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        # The payload plus TCP/IP headers (a few percent), and nothing of it in another class's "out".
        assert sent <= moved[traffic] <= sent * 1.1, (traffic, moved)
        others = {k: v for k, v in moved.items() if k.endswith("-out") and k != traffic}
        assert all(v < sent / 10 for v in others.values()), (traffic, moved)
