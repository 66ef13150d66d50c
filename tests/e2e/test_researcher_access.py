"""Researcher access on real nodes: from the hub's side, a ClusterIP is reached through the NAT hosts'
load balancer and the NAT host's rendered rules (infra/nat_hosts.py); from a pod, the same Service
address is used without any rewrite of the pod's address; and the NAT hosts forward nothing else
from outside the cluster.

Each test reads what a packet did: which address the server saw, or that nothing answered and which
rule counted the packet.
"""

from __future__ import annotations

import uuid

import pytest
import yaml

from infra.nat_hosts import nat_ruleset
from tests.e2e.cluster import Cluster, boot
from tests.e2e.hosts import wait_for
from tests.e2e.hub_side import HubSide, start_hub_side
from tests.e2e.runtime import RealNode
from tests.e2e.test_data_plane import NAMESPACE, PROBE_PORT, probe, run_probe_pod

pytestmark = pytest.mark.e2e

BYTES = 1000


@pytest.fixture(scope="module")
def box(binaries, tmp_path_factory) -> Cluster:
    # One node of each pool and the NAT host, all real: the server and client pods share the CPU node.
    cluster = boot("dev", tmp_path_factory.mktemp("researchers"), binaries, nodes_per_pool=1, real_nodes=True)
    yield cluster
    cluster.close()


@pytest.fixture(scope="module")
def hub(box: Cluster) -> HubSide:
    return start_hub_side(box)


@pytest.fixture(scope="module")
def server(box: Cluster) -> tuple[str, str, str]:
    """A tenant pod serving the probe on the CPU node behind a ClusterIP Service: ``(pod, pod IP, ClusterIP)``."""
    app = f"researchers-{uuid.uuid4().hex[:6]}"
    pod, pod_ip = run_probe_pod(box, _cpu_node(box), labels={"app": app})
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": app, "namespace": NAMESPACE},
        "spec": {"selector": {"app": app}, "ports": [{"protocol": "TCP", "port": PROBE_PORT}]},
    }
    box.kubectl("create", "-f", "-", input=yaml.safe_dump(service))
    cluster_ip = box.get_json("service", "-n", NAMESPACE, app)["spec"]["clusterIP"]
    return pod, pod_ip, cluster_ip


def _cpu_node(cluster: Cluster) -> RealNode:
    name = next(n.machine.name for n in cluster.nodes if n.pool == "cpu")
    return next(n for n in cluster.real_nodes if n.machine.name == name)


def _send(box: Cluster, hub: HubSide, target: str) -> str:
    result = box.network.run(hub.researcher, ["/usr/local/bin/probe", "send", target, str(BYTES)], check=False)
    return result.stdout if result.returncode == 0 else ""


def test_a_researcher_reaches_a_cluster_ip_through_the_nat_hosts(box: Cluster, hub: HubSide, server):
    _, _, cluster_ip = server
    target = f"{cluster_ip}:{PROBE_PORT}"
    # Bounded: the NAT host's kube-proxy programs the new Service within its sync period.
    answer = wait_for(
        f"the researcher's host to reach {target} through {hub.frontend}",
        lambda: _send(box, hub, target),
        timeout=60,
        interval=1,
        on_timeout=box.describe,
    )
    # The server saw a NAT host's address: the flow was translated there, so the reply goes back through it.
    source = answer.split()[1]
    assert answer.split() == ["from", source, "bytes", str(BYTES)] and source in hub.nat_hosts, answer


def test_a_pod_uses_the_same_cluster_ip_with_its_own_address(box: Cluster, server):
    _, _, cluster_ip = server
    client, client_ip = run_probe_pod(box, _cpu_node(box))
    answer = probe(box, client, "send", f"{cluster_ip}:{PROBE_PORT}", str(BYTES))
    assert answer.split() == ["from", client_ip, "bytes", str(BYTES)], answer


def test_the_nat_hosts_forward_nothing_but_the_service_range_from_outside(box: Cluster, hub: HubSide, server):
    # A hub route sending a pod's address to the NAT hosts too: the packet reaches a NAT host, which drops it.
    _, pod_ip, _ = server
    box.network.run(hub.researcher, ["ip", "route", "replace", f"{pod_ip}/32", "via", hub.frontend])
    (nat_host,) = [n for n in box.real_nodes if n.machine.ip in hub.nat_hosts]
    forward = next(c for c in nat_ruleset(box.spec.addresses).chains if c.table == "filter")
    before = _dropped(box, nat_host, forward.name)
    assert _send(box, hub, f"{pod_ip}:{PROBE_PORT}") == "", f"a researcher reached pod {pod_ip} through a NAT host"
    assert _dropped(box, nat_host, forward.name) > before, "the NAT host's forward rule did not drop the packet"


def _dropped(box: Cluster, node: RealNode, chain: str) -> int:
    """Packets the chain's DROP rules have counted on ``node``."""
    listing = box.network.run(node.host, ["iptables", "-t", "filter", "-L", chain, "-v", "-x", "-n"]).stdout
    return sum(int(line.split()[0]) for line in listing.splitlines() if line.split()[2:3] == ["DROP"])
