"""Day 2: what a deploy may do to a live cluster, decided from the last deploy's outputs.

Pure Python (no Pulumi): the program (``components/previous_deploy.py``), the offline plan
diff (``infra/plan/diff.py``) and the policy pack read the same facts from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from infra.config import LOCATION_KEY, ClusterConfig
from infra.contract import OUTPUT_NAME
from infra.errors import ConfigError

# Every dedicated VM carries its role in this tag (Azure tag names cannot hold "/"). The plan diff and
# the policy pack group machines by it: no deploy may restart more than one machine of a role.
MACHINE_ROLE_TAG = "supercluster.io_role"
APISERVER_ROLE = "apiserver"
NAT_HOST_ROLE = "nat-host"
ETCD_ROLES = ("etcd", "events-etcd")  # infra.etcd.spec.MAIN and EVENTS (checked by tests/infra/test_day2.py)
ROLLED_ROLES = (APISERVER_ROLE, NAT_HOST_ROLE, *ETCD_ROLES)

# VM inputs whose in-place change restarts the machine:
# - hardwareProfile.vmSize: "If the virtual machine is currently running, changing its size will cause it to
#   be restarted" (learn.microsoft.com/azure/virtual-machines/sizes/resize-vm);
# - securityProfile.encryptionAtHost: the VM must be deallocated to change it
#   (learn.microsoft.com/azure/virtual-machines/disks-enable-host-based-encryption-portal).
RESTARTING_VM_INPUTS = ("hardwareProfile.vmSize", "securityProfile.encryptionAtHost")


# --------------------------------------------------------------------------- the last deploy

@dataclass(frozen=True)
class LastDeploy:
    """What the last ``pulumi up`` of this stack exported (``{}`` on the first deploy): the outputs
    contract's ``cluster`` and the operator output ``network``. Unknown parts are ``None``/empty."""

    cluster_name: str | None = None
    location: str | None = None
    kubernetes_version: str | None = None
    service_cidr: str | None = None
    address_space: str | None = None
    scale_sets: frozenset[str] = frozenset()  # shard names (``cpu-s000``): scale sets that exist

    @property
    def exists(self) -> bool:
        return self.cluster_name is not None


def _text(mapping: Any, *path: str) -> str | None:
    for key in path:
        if not isinstance(mapping, Mapping):
            return None
        mapping = mapping.get(key)
    return mapping if isinstance(mapping, str) else None


def last_deploy(outputs: Mapping[str, Any] | None) -> LastDeploy:
    """Reads the stack's previous outputs (``pulumi:pulumi:readStackOutputs``; the plan's ``outputs.json``)."""
    outputs = outputs or {}
    cluster = outputs.get(OUTPUT_NAME)
    if not isinstance(cluster, Mapping):
        return LastDeploy()
    pools = cluster.get("nodePools")
    shards = frozenset(
        shard["name"] for pool in (pools.values() if isinstance(pools, Mapping) else ())
        if isinstance(pool, Mapping) for shard in (pool.get("shards") or ())
        if isinstance(shard, Mapping) and isinstance(shard.get("name"), str))
    return LastDeploy(
        cluster_name=_text(cluster, "clusterName"), location=_text(cluster, "location"),
        kubernetes_version=_text(cluster, "kubernetesVersion"),
        service_cidr=_text(cluster, "network", "serviceCidr"),
        address_space=_text(outputs, "network", "addressSpace"),
        scale_sets=shards,
    )


# --------------------------------------------------------------------------- refused: no live path

# Changes a live cluster cannot take: (config key, its value now, its value in the last deploy, why, the
# rebuild path). docs/day2.md has a row for each (tests/infra/test_day2.py checks it).
_NEW_CLUSTER = "build a new cluster beside this one (a new stack), move the workloads, then retire this one"
REFUSED: dict[str, tuple[str, str]] = {
    "clusterName": ("every Azure name derives from it: each resource would be replaced, etcd and the pools "
                    "with them", _NEW_CLUSTER),
    LOCATION_KEY: ("Azure resources cannot move regions: everything would be re-created", _NEW_CLUSTER),
    "network.serviceCidr": ("running apiservers (their cloud-init is ignored), every Service's ClusterIP and "
                            "every pod's DNS keep the old range while nodes move to the new one: a cluster-wide "
                            "DNS outage", _NEW_CLUSTER),
    "network.addressSpace": ("every subnet holding NICs would move (Azure refuses a subnet prefix change while "
                             "it holds NICs)", _NEW_CLUSTER),
}


def _current(config: ClusterConfig) -> dict[str, str]:
    return {"clusterName": config.cluster_name, LOCATION_KEY: config.location,
            "network.serviceCidr": str(config.network.service_cidr),
            "network.addressSpace": str(config.network.address_space)}


def _previous(last: LastDeploy) -> dict[str, str | None]:
    return {"clusterName": last.cluster_name, LOCATION_KEY: last.location,
            "network.serviceCidr": last.service_cidr, "network.addressSpace": last.address_space}


def check_live_changes(last: LastDeploy, config: ClusterConfig) -> None:
    """Refuses, before anything is declared, a change the live cluster cannot take."""
    if not last.exists:
        return
    now, before = _current(config), _previous(last)
    for key, (why, rebuild) in REFUSED.items():
        if before[key] is not None and now[key] != before[key]:
            raise ConfigError(key, now[key], f"{before[key]!r} as in the last deploy: it cannot change on a "
                                             f"live cluster ({why}); to change it, {rebuild} (docs/day2.md)")
