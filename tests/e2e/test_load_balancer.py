"""The box's load balancer takes a backend out, and back in, as the rendered Azure probe does (fast suite)."""

from __future__ import annotations

from tests.e2e.load_balancer import HA_PORTS_TABLE, Backends, ha_ports_route

A, B = ("10.0.0.69", 6443), ("10.0.0.70", 6443)


def test_a_backend_changes_state_only_after_threshold_probes_in_a_row(capsys):
    backends = Backends([A, B], threshold=2)
    assert backends.healthy == []  # every backend starts out, until its probes pass
    for ok in (True, True):
        backends.observe(A, ok)
        backends.observe(B, ok)
    assert backends.healthy == [A, B]
    backends.observe(A, False)
    backends.observe(A, True)  # one failed probe, then a good one: the streak starts over
    backends.observe(A, False)
    assert backends.healthy == [A, B]
    backends.observe(A, False)
    assert backends.healthy == [B]
    changes = [line for line in capsys.readouterr().out.splitlines() if '"10.0.0.69:6443"' in line]
    assert len(changes) == 2 and '"healthy": false' in changes[-1]


def test_the_ha_ports_route_spreads_over_the_healthy_backends_and_drops_with_none():
    assert ha_ports_route([]) == ["ip", "route", "replace", "blackhole", "default", "table", HA_PORTS_TABLE]
    spread = ha_ports_route([A, B])
    assert spread[:6] == ["ip", "route", "replace", "default", "table", HA_PORTS_TABLE]
    assert spread[6:] == ["nexthop", "via", A[0], "dev", "eth0", "nexthop", "via", B[0], "dev", "eth0"]
