"""A NAT host lost while researchers' requests run through the NAT hosts' load balancer
(docs/reliability.md, "A NAT host lost"; runbook docs/runbooks/nat-host-lost.md).

The box is the dev plan with two NAT hosts (``network.natHosts.count=2``: dev renders one, and with
one there is nothing to fail over to; prod renders three), both real nodes (containerd, kubelet,
kube-proxy from their rendered units), and the hub side read from the plan (tests/e2e/hub_side.py:
the researcher's host, the hub's route and the HA-ports load balancer probing kube-proxy's
``/healthz``). The pools' nodes run nodesim: nothing here needs a pod.

The researcher's requests are the fault suite's writer (tests/e2e/writer.py) on the researcher's
host, writing ConfigMaps to the ``kubernetes`` Service's ClusterIP: a Service in the range the hub
routes to the NAT hosts whose every request is acknowledged or not, and whose acknowledged writes can
be counted afterwards. Each of its keep-alive connections is hashed to one NAT host, which translates
it (DNAT to the apiserver, masquerade to its own address); the host that forwarded the most of them
is lost as a VM is (every process killed, its NIC down: tests/e2e/faults.py ``lose``).

The promise: the load balancer takes the lost host out within its probe's budget; only requests
already on their way through the lost host fail (none started after the load balancer took it out);
the writer is acknowledged again through the host left; and every acknowledged write is there.
Marked ``faults``: it runs by the command in docs/reliability.md, not in CI's e2e stage.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from infra.facts import labels
from infra.nat_hosts import nat_ruleset
from tests.e2e.cluster import Cluster, boot
from tests.e2e.faults import WRITER_TIMEOUT_S, Writes, load_balancer_changes, lose, percentile
from tests.e2e.hosts import wait_for
from tests.e2e.hub_side import NAT_LOAD_BALANCER, HubSide, start_hub_side
from tests.e2e.load_balancer import PROBE_TIMEOUT_SECONDS
from tests.e2e.runtime import RealNode, kill_namespace_processes

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

NAT_HOSTS = 2
WRITES_PER_S = 10.0
# Enough connections that both NAT hosts carry some (each is hashed on its 5-tuple).
WRITER_WORKERS = 6
QUIET_S = 5.0  # how long the load runs untouched before the loss
IN_FLIGHT_S = 1.0  # a request started this soon after the load balancer took the host out may be on its way there


@pytest.fixture(scope="module")
def box(binaries: Path, tmp_path_factory: pytest.TempPathFactory):
    cluster = boot(
        "dev",
        tmp_path_factory.mktemp("nat-host-lost"),
        binaries,
        overrides=[f"network.natHosts.count={NAT_HOSTS}"],
        nodes_per_pool=1,
        real_nodes=[labels.ROLE_NAT_HOST],
    )
    yield cluster
    cluster.close()


def _forwarded(cluster: Cluster, node: RealNode) -> int:
    """Connections from outside the cluster to a service that ``node`` has forwarded: its forward chain
    returns a connection's later packets at its ESTABLISHED rule, so the service-range rule counts each
    connection's first packet (kube-proxy's own masquerade may translate it before the NAT chain, so the
    MASQUERADE rule's counter does not count them)."""
    forward = next(c for c in nat_ruleset(cluster.spec.addresses).chains if c.table == "filter")
    listing = cluster.network.run(node.host, ["iptables", "-t", "filter", "-L", forward.name, "-v", "-x", "-n"]).stdout
    return sum(int(line.split()[0]) for line in listing.splitlines() if "ctorigdst" in line)


def _longest_gap(writes: Writes, since: float, until: float) -> float:
    """The longest time in ``[since, until]`` in which no create was acknowledged (any connection)."""
    ends = sorted(r["t"] + r["s"] for r in writes.records(since, until, "create") if r["code"] == 201)
    return round(max((b - a for a, b in zip([since, *ends], [*ends, until], strict=True)), default=0.0), 1)


def _probe_budget_s(cluster: Cluster) -> float:
    """How long the load balancer may take to stop sending to a lost host: the probe's interval times
    (probeThreshold + 1) (the loss may come just after a good probe) plus one probe's timeout."""
    probe = cluster.plan.load_balancer(NAT_LOAD_BALANCER)["probes"][0]
    return probe["intervalInSeconds"] * (probe["probeThreshold"] + 1) + PROBE_TIMEOUT_SECONDS


def test_a_nat_host_lost_researchers_requests_continue_through_the_others(box: Cluster):
    hub: HubSide = start_hub_side(box)
    # Azure's load balancer sends a dead backend its flows, which vanish, until the probe takes it out; a
    # Linux router instead answers "host unreachable" once the next hop stops answering ARP, and a new
    # connection would fail at once instead of waiting out the client's timeout.
    unreachable = ["-p", "icmp", "--icmp-type", "destination-unreachable", "-j", "DROP"]
    box.network.run(hub.load_balancer.host, ["iptables", "-A", "OUTPUT", *unreachable])
    assert len(hub.nat_hosts) == NAT_HOSTS, hub.nat_hosts
    server = f"https://{box.spec.addresses.kubernetes_service_ip}:443"
    writes = Writes.start(box, hub.researcher, server, WRITES_PER_S, WRITER_WORKERS)
    # Bounded: the NAT hosts' kube-proxy programs the kubernetes Service within its sync period.
    writes.wait_writing(0, timeout=120)
    time.sleep(QUIET_S)
    baseline_end = time.time()
    nat_nodes = [n for n in box.real_nodes if n.machine.ip in hub.nat_hosts]
    carried = {n.machine.name: _forwarded(box, n) for n in nat_nodes}
    lost = max(nat_nodes, key=lambda n: carried[n.machine.name])
    assert carried[lost.machine.name] > 0, f"no researcher connection went through a NAT host: {carried}"

    lost_at = lose(box, lost.host)
    kill_namespace_processes(lost.host)  # its containers' shims too, which leave the units' process groups
    backend = f"{lost.machine.ip}:{box.plan.load_balancer(NAT_LOAD_BALANCER)['probes'][0]['port']}"
    budget = _probe_budget_s(box)
    (detected_at,) = wait_for(
        f"the NAT load balancer to take {backend} out",
        lambda: load_balancer_changes(hub.load_balancer, backend, False, lost_at),
        timeout=budget + 30,
        interval=1,
        on_timeout=box.describe,
    )
    # Every request still on its way through the lost host ends within the writer's timeout; then the
    # writer must be acknowledged again (through the host left) and keep going for QUIET_S.
    time.sleep(WRITER_TIMEOUT_S + 1)
    writes.wait_writing(detected_at + WRITER_TIMEOUT_S, timeout=60)
    time.sleep(QUIET_S)
    settled = time.time()

    failed = writes.failed(lost_at, settled)
    recovered_at = max((r["t"] + r["s"] for r in failed), default=lost_at)
    window = writes.window(lost_at, settled)
    latencies = [r["s"] for r in writes.records(lost_at, settled, "create") if r["code"] == 201]
    figures = {
        "nat_hosts": NAT_HOSTS,
        "writer_connections": WRITER_WORKERS,
        "connections_through_each_host_before": carried,
        "lost": lost.machine.name,
        "baseline": writes.window(baseline_end - QUIET_S, baseline_end),
        "detect_s": round(detected_at - lost_at, 1),
        "detect_budget_s": budget,
        "last_error_ended_s": round(recovered_at - lost_at, 1),
        "writer": window,
        "create_max_s": max(latencies, default=None),
        "create_p99_s": percentile(latencies, 0.99),
        "longest_without_acknowledged_create_s": _longest_gap(writes, lost_at - 1, settled),
        "failed": [{"after_loss_s": round(r["t"] - lost_at, 1), "s": r["s"], "op": r["op"]} for r in failed],
    }
    print(f"\nnat host lost: {json.dumps(figures)}", flush=True)

    assert detected_at - lost_at <= budget, figures
    late = [r for r in failed if r["t"] >= detected_at + IN_FLIGHT_S]
    assert not late, f"requests started after the load balancer took {backend} out failed: {late[:5]}"
    assert recovered_at - lost_at <= budget + WRITER_TIMEOUT_S + IN_FLIGHT_S, figures
    assert writes.window(detected_at + WRITER_TIMEOUT_S, settled)["create"]["errors"] == 0, figures
    missing = writes.missing()
    assert not missing, f"{len(missing)} acknowledged ConfigMaps are gone: {missing[:10]}"
