"""The apiservers as one scale set that heals and rolls itself (docs/control-plane.md, the decision).

Every apiserver boots the same cloud-init (``apiserver_machine``: each decides its address and serving
certificate at boot), so they are the instances of one Uniform scale set, in the load balancer's backend
pool, spread over the zones. Azure then does what a runbook and five deploys did:

- **Repairs.** The Application Health extension probes each instance's own apiserver on
  ``/livez?exclude=etcd``; automatic instance repairs replace an instance that stays unhealthy. Not
  ``/readyz`` and not plain ``/livez``: the pinned apiserver adds its etcd check to both
  (k8s.io/apiserver ``pkg/server/options/etcd.go``), so when etcd loses quorum every apiserver would
  fail them at once and repairs would replace all five together, which brings nothing back. Traffic
  keeps the load balancer's own ``/readyz`` probe (components/control_plane.py): an apiserver that
  cannot reach etcd gets no requests, but is not replaced.
- **Rolling upgrades.** A model change (a flag, a release, a machine image, a rotated secret's
  readiness re-run) reaches one instance per batch, the next batch only once the upgraded one is
  healthy on that same signal; an unhealthy upgraded instance stops the upgrade. This is what keeps
  "no deploy restarts more than one control-plane machine" true now.

Pure data: components/control_plane.py declares it. Numbers carry their Azure source.
"""

from __future__ import annotations

from typing import Any

from infra.control_plane.apiserver_machine import READY_TIMEOUT_SECONDS
from infra.facts import ports

# The repair and rolling-upgrade signal (above). The health path names one check to leave out
# (k8s.io/apiserver pkg/server/healthz: the ``exclude`` query parameter of every health endpoint).
HEALTH_PATH = "/livez?exclude=etcd"
# learn.microsoft.com/azure/virtual-machine-scale-sets/virtual-machine-scale-sets-health-extension
# ("Extension schema for Binary Health States"): publisher, type and the 2.0 handler, which reads gracePeriod.
HEALTH_EXTENSION = {
    "publisher": "Microsoft.ManagedServices",
    "type": "ApplicationHealthLinux",
    "typeHandlerVersion": "2.0",
}
HEALTH_EXTENSION_NAME = "apiserver-health"
# The same page: intervalInSeconds 5-60 (default 5); numberOfProbes 1-24 (default 1) consecutive results
# before the state changes. Three 5 s probes: a restart of the apiserver alone (systemd brings it back
# in seconds) is not a lost machine.
HEALTH_INTERVAL_SECONDS = 5
HEALTH_PROBES = 3
# The same page: gracePeriod, seconds after the extension starts during which a failing probe is not
# reported unhealthy (at most 14400). A booting apiserver fetches its secrets and issues its certificate
# first; the readiness extension gives it READY_TIMEOUT_SECONDS, so the health signal does too.
HEALTH_GRACE_SECONDS = READY_TIMEOUT_SECONDS

# AutomaticRepairsPolicy (Microsoft.Compute 2024-11-01, the API version the pinned azure-native sends):
# gracePeriod ISO 8601, 10 to 90 minutes (PT10M to PT90M); repairAction Replace (the default) deletes the
# instance and creates a new one from the model. The grace starts after the instance's last state change:
# a new instance gets as long as its readiness extension allows before it is judged.
REPAIR_GRACE_MINUTES = READY_TIMEOUT_SECONDS // 60
REPAIR_ACTION = "Replace"

# RollingUpgradePolicy (same API version): maxBatchInstancePercent 5-100 (default 20), never above
# maxUnhealthyInstancePercent; pauseTimeBetweenBatches ISO 8601 (default PT0S).
MIN_BATCH_PERCENT = 5
# Between batches: the load balancer takes the upgraded instance in after probeThreshold (2) probes of
# 5 s, and the watches its restart dropped reconnect to the others (--goaway-chance spreads them back).
# One minute lets both settle before the next apiserver goes.
PAUSE_BETWEEN_BATCHES = "PT1M"

READINESS_EXTENSION_NAME = "apiserver-ready"


def one_instance_percent(capacity: int) -> int:
    """The largest whole ``maxBatchInstancePercent`` whose batch is one instance of ``capacity`` (20 of 5):
    ``percent * capacity <= 100``; at least Azure's minimum, which stays one instance up to 20 apiservers."""
    return max(MIN_BATCH_PERCENT, 100 // capacity)


def batch_instances(percent: int, capacity: int) -> int:
    """How many instances a batch of ``percent`` may hold (a maximum: Azure rounds down, and a batch holds at
    least one)."""
    return max(1, percent * capacity // 100)


def upgrade_policy(capacity: int) -> dict[str, Any]:
    """Rolling, one instance per batch, gated by the health extension: any upgraded instance found unhealthy
    stops the upgrade (fix forward, docs/day2.md), and none starts while another is already unhealthy."""
    percent = one_instance_percent(capacity)
    return {
        "mode": "Rolling",
        "rollingUpgradePolicy": {
            "maxBatchInstancePercent": percent,
            # Checked before every batch: the one instance it takes, and no other already unhealthy.
            "maxUnhealthyInstancePercent": percent,
            "maxUnhealthyUpgradedInstancePercent": 0,
            "pauseTimeBetweenBatches": PAUSE_BETWEEN_BATCHES,
            # An instance that is down anyway is upgraded first.
            "prioritizeUnhealthyInstances": True,
            "rollbackFailedInstancesOnPolicyBreach": False,
        },
    }


def automatic_repairs_policy() -> dict[str, Any]:
    return {"enabled": True, "gracePeriod": f"PT{REPAIR_GRACE_MINUTES}M", "repairAction": REPAIR_ACTION}


def health_extension() -> dict[str, Any]:
    """The scale set's one health source (Azure takes the extension or a load balancer probe, not both): each
    instance's own apiserver, etcd's check left out. Started after the readiness extension."""
    return {
        "name": HEALTH_EXTENSION_NAME,
        **HEALTH_EXTENSION,
        "autoUpgradeMinorVersion": True,
        "provisionAfterExtensions": [READINESS_EXTENSION_NAME],
        "settings": {
            "protocol": "https",
            "port": ports.APISERVER,
            "requestPath": HEALTH_PATH,
            "intervalInSeconds": HEALTH_INTERVAL_SECONDS,
            "numberOfProbes": HEALTH_PROBES,
            "gracePeriod": HEALTH_GRACE_SECONDS,
        },
    }
