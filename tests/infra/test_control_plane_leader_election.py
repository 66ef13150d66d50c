"""The leader-elected components keep their leases while the main etcd elects a new leader.

When etcd's leader dies, a write already on its way to it is answered only once etcd's request
timeout has passed: 5 s plus two election timeouts (go.etcd.io/etcd/server/v3 config.go,
``ServerConfig.ReqTimeout``), 10 s with the rendered 2,500 ms; the fault suite measured writes
stalling 10 s (docs/reliability.md). With upstream's leader-election defaults (15 s lease, 10 s
renew deadline, 2 s retry period: kube-controller-manager's ``--leader-elect-*`` flags and the
kube-scheduler configuration's ``leaderElection``, kubernetes.io reference) the renewal caught in
that stall uses up the whole renew deadline: the leader gives up its lease and exits, and the next
one starts every informer again (a full LIST of the cluster) just as etcd recovers.
"""

from __future__ import annotations

import pytest

from infra.control_plane import paths
from infra.etcd.config_file import etcd_config
from tests.etcd_specs import clusters
from tests.helpers import load_yaml
from tests.infra.control_plane_files import component_flags, files, machines

COMPONENTS = ("kube-controller-manager", "kube-scheduler")
# What either component runs when nothing is rendered (k8s.io/component-base config/v1alpha1 defaults.go).
UPSTREAM_DEFAULTS = ("15s", "10s", "2s")


def _seconds(duration: str) -> float:
    assert duration.endswith("s") and duration[:-1].isdigit(), duration
    return float(duration[:-1])


def _timings(component: str) -> tuple[float, float, float]:
    """``(lease duration, renew deadline, retry period)`` as the prod apiserver VM receives them."""
    machine = machines("prod")[0]
    if component == "kube-scheduler":
        config = load_yaml(files(machine)[paths.SCHEDULER_CONFIG])["leaderElection"]
        values = config.get("leaseDuration"), config.get("renewDeadline"), config.get("retryPeriod")
    else:
        flags = component_flags(machine, paths.CONTROLLER_MANAGER_UNIT)
        values = tuple(
            flags.get(f"leader-elect-{name}") for name in ("lease-duration", "renew-deadline", "retry-period")
        )
    lease, renew, retry = (_seconds(v or default) for v, default in zip(values, UPSTREAM_DEFAULTS, strict=True))
    return lease, renew, retry


def _etcd_request_timeout_s() -> float:
    _, main, _ = clusters()
    election_timeout_ms = etcd_config(main, main.members[0])["election-timeout"]
    return 5 + 2 * election_timeout_ms / 1000


@pytest.mark.parametrize("component", COMPONENTS)
def test_a_renewal_stalled_by_an_etcd_election_leaves_time_for_one_more_before_the_renew_deadline(component):
    lease, renew, retry = _timings(component)
    stall = _etcd_request_timeout_s()
    # The first attempt of a renewal round waits out the stall; the next comes a retry period later
    # (client-go leaderelection: the round starts a retry period after the last success).
    assert renew > stall + 2 * retry, (component, renew, stall, retry)
    # A leader that gave up stops before a standby may take the lease (client-go requires lease > renew).
    assert lease > renew, (component, lease, renew)


def test_the_controller_manager_and_the_scheduler_run_the_same_timings():
    assert _timings("kube-controller-manager") == _timings("kube-scheduler")
