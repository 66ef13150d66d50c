"""Leader election of kube-controller-manager and kube-scheduler: one set of timings for both.

Upstream's defaults (15 s lease, 10 s renew deadline, 2 s retry period: k8s.io/component-base
config/v1alpha1 defaults.go; kubernetes.io, the kube-controller-manager flags and the kube-scheduler
configuration's ``leaderElection``) give the leader 10 s to renew. That is exactly how long a write
waits when the main etcd's leader dies (``REQUEST_TIMEOUT_S``), so an ordinary etcd election made
the leader give up its lease and exit, and the next leader start every informer again (a full LIST
of a 7,500-node cluster) just as etcd recovered. The cost of longer timings: a leader whose VM is
lost is replaced after the lease duration (30 s instead of 15 s), during which no controller runs;
nodes do not notice (their Leases last 40 s), and a VM lost is rarer than an etcd election.
"""

from __future__ import annotations

from infra.etcd.config_file import REQUEST_TIMEOUT_S

RETRY_PERIOD_S = 2  # upstream's default: how often the leader renews and a standby tries to acquire
# A renewal round's first attempt may wait out a whole etcd request timeout; twice that leaves time
# for the attempts after it, a retry period apart, once etcd has its new leader.
RENEW_DEADLINE_S = int(2 * REQUEST_TIMEOUT_S)
# Upstream's ratio of lease to renew deadline (15 s to 10 s): a leader that gave up has stopped
# acting well before a standby may take the lease.
LEASE_DURATION_S = RENEW_DEADLINE_S * 3 // 2


def controller_manager_flags() -> dict[str, str]:
    """kube-controller-manager's ``--leader-elect-*`` timing flags."""
    return {
        "leader-elect-lease-duration": f"{LEASE_DURATION_S}s",
        "leader-elect-renew-deadline": f"{RENEW_DEADLINE_S}s",
        "leader-elect-retry-period": f"{RETRY_PERIOD_S}s",
    }


def scheduler_config() -> dict[str, str]:
    """The same timings as fields of the KubeSchedulerConfiguration's ``leaderElection``."""
    return {
        "leaseDuration": f"{LEASE_DURATION_S}s",
        "renewDeadline": f"{RENEW_DEADLINE_S}s",
        "retryPeriod": f"{RETRY_PERIOD_S}s",
    }
