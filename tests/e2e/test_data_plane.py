"""The data plane on real nodes: pods started by the real kubelet, containerd and runc, holding the
addresses Azure CNI would give them, talking through the rendered rules.

Each test reads what a packet did (who a server saw, which counters moved), never the rendered text.
"""

from __future__ import annotations

import uuid

import pytest
import yaml

from infra.facts.labels import HOSTNAME_LABEL
from infra.node.cni import IMDS_IP, WIRESERVER_BLOCKED_TCP_PORTS, WIRESERVER_IP
from tests.e2e.cluster import Cluster, boot
from tests.e2e.hosts import wait_for
from tests.e2e.runtime import RealNode

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
    """A tenant pod serving the probe on ``node``; returns ``(name, pod IP)`` once it runs. It is placed as a
    tenant may place it, by the node's hostname label through the scheduler: the tenant admission policy
    refuses ``spec.nodeName`` and tolerating every taint in a tenant namespace (docs/security.md)."""
    name = f"probe-{uuid.uuid4().hex[:6]}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels or {}},
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
    blocked = [f"{IMDS_IP}:80", *(f"{WIRESERVER_IP}:{port}" for port in WIRESERVER_BLOCKED_TCP_PORTS)]
    for target in blocked:
        assert probe(box, client, "send", target, "1", check=False) == "", f"a pod reached {target}"
        answer = box.network.run(cpu.host, ["/usr/local/bin/probe", "send", target, "1"]).stdout
        assert answer.split()[:1] == ["from"], f"the node could not reach {target}: {answer}"
