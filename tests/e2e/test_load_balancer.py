"""The box's load balancer takes a backend out, and back in, as the rendered Azure probe does (fast suite)."""

from __future__ import annotations

from tests.e2e.load_balancer import Backends

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
