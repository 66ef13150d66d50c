"""Day 2: what a deploy may do to a live cluster, decided from the last deploy's outputs.

Pure Python (no Pulumi): the assembly of the desired cluster (``infra/assembly/desired_cluster.py``), the offline plan
diff (``plan/diff.py``) and the policy pack read the same facts from here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from infra.config.cluster_config import LOCATION_KEY, ClusterConfig
from infra.config.errors import ConfigError
from infra.contract import OUTPUT_NAME
from infra.facts import roles, tags

# Every dedicated VM carries its role in this tag (Azure tag names cannot hold "/"). The plan diff and
# the policy pack group machines by it: no deploy may restart more than one machine of a role.
MACHINE_ROLE_TAG = tags.MACHINE_ROLE
APISERVER_ROLE = roles.APISERVER.machine
NAT_HOST_ROLE = roles.NAT_HOST.machine
ETCD_ROLES = (roles.ETCD.machine, roles.EVENTS_ETCD.machine)
ROLLED_ROLES = (APISERVER_ROLE, NAT_HOST_ROLE, *ETCD_ROLES)
# tags.CLOUD_INIT (infra/facts/tags.py) holds the fingerprint of the cloud-init a VM runs. Where a VM ignores its
# customData the state keeps the value it was created with, whatever the program declares since: the tag says which.
CUSTOM_DATA_PATH = "osProfile.customData"

# VM inputs whose in-place change restarts the machine:
# - hardwareProfile.vmSize: "If the virtual machine is currently running, changing its size will cause it to
#   be restarted" (learn.microsoft.com/azure/virtual-machines/sizes/resize-vm);
# - securityProfile.encryptionAtHost: the VM must be deallocated to change it
#   (learn.microsoft.com/azure/virtual-machines/disks-enable-host-based-encryption-portal).
RESTARTING_VM_INPUTS = ("hardwareProfile.vmSize", "securityProfile.encryptionAtHost")


# --------------------------------------------------------------------------- the last deploy

ROLLOUT_OUTPUT = "rollout"  # not part of the contract: this program's own record of what each machine runs
# The ``rollout`` output's record of the apiserver scale set's model (infra/control_plane/scale_set.py).
APISERVER_SCALE_SET_RECORD = "apiserverScaleSet"
# Also the program's own: which machine image version the deploy built, with what (infra/assembly/machine_image.py).
MACHINE_IMAGES_OUTPUT = "machineImages"
# The node Prometheus shards this deploy runs (``{"nodeShards": n}``): the next deploy keeps the count while it
# still holds the pools' maxNodes, so resizing a pool restarts no shard (infra/addons/monitoring).
MONITORING_OUTPUT = "monitoring"


@dataclass(frozen=True)
class MachineState:
    """What one rolled machine runs: its cloud-init (fingerprint), its size, its Kubernetes release and the
    machine image version it booted (Azure cannot change a VM's image in place: a new one is a replacement)."""

    cloud_init: str
    vm_size: str
    kubernetes_version: str
    image_version: str

    def record(self, name: str) -> dict[str, str]:
        return {
            "name": name,
            "cloudInit": self.cloud_init,
            "vmSize": self.vm_size,
            "kubernetesVersion": self.kubernetes_version,
            "imageVersion": self.image_version,
        }

    @staticmethod
    def parse(record: Any) -> MachineState | None:
        if not isinstance(record, Mapping):
            return None
        fields = [record.get(k) for k in ("cloudInit", "vmSize", "kubernetesVersion", "imageVersion")]
        texts = [value for value in fields if isinstance(value, str)]
        return MachineState(*texts) if len(texts) == len(fields) else None


@dataclass(frozen=True)
class RollingUpgrade:
    """Where the apiserver scale set's rolling upgrade stands, as Azure reports it before a deploy: the latest
    rolling upgrade (``GET .../virtualMachineScaleSets/{name}/rollingUpgrades/latest``, ``runningStatus.code``
    RollingForward, Cancelled, Completed or Faulted, and ``progress``'s instance counts; ``None`` when the scale
    set never had one, i.e. every instance was created from its model) and each instance's
    ``latestModelApplied`` (``GET .../virtualMachines``), which also covers an upgrade not yet started."""

    latest: Mapping[str, Any] | None
    latest_model_applied: tuple[bool, ...]

    def unfinished(self) -> str | None:
        """Why the scale set's instances are not all on its model yet, or None."""
        behind = sum(1 for applied in self.latest_model_applied if not applied)
        if behind:
            return f"{behind} of {len(self.latest_model_applied)} apiserver instances not on the latest model"
        if self.latest is None:
            return None
        code = _text(self.latest, "runningStatus", "code")
        left = {
            key: _at(self.latest, "progress", key)
            for key in ("failedInstanceCount", "inProgressInstanceCount", "pendingInstanceCount")
        }
        if code != "Completed" or any(left.values()):
            counts = ", ".join(f"{key} {value}" for key, value in left.items() if value)
            return f"the apiserver rolling upgrade is {code or 'unknown'}" + (f" ({counts})" if counts else "")
        return None


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
    # The ``rollout`` output: what each rolled machine runs, by role; None when the last deploy had none.
    machines: Mapping[str, tuple[MachineState, ...]] | None = None
    node_kubernetes_version: str | None = None
    # The machine image version the nodes' scale-set models and the NAT hosts booted (the ``rollout`` output).
    node_machine_image_version: str | None = None
    built_image_version: str | None = None  # the ``machineImages`` output's version
    monitoring_node_shards: int | None = None  # the ``monitoring`` output's node shard count
    # The apiserver scale set's model as the last deploy left it (the ``rollout`` output), None before it existed.
    apiserver_scale_set: MachineState | None = None
    # How far Azure has rolled that model out, read from Azure before this deploy (``RollingUpgrade``).
    apiserver_rolling_upgrade: RollingUpgrade | None = None

    @property
    def exists(self) -> bool:
        return self.cluster_name is not None


def _at(mapping: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(mapping, Mapping):
            return None
        mapping = mapping.get(key)
    return mapping


def _text(mapping: Any, *path: str) -> str | None:
    value = _at(mapping, *path)
    return value if isinstance(value, str) else None


def _count(mapping: Any, *path: str) -> int | None:
    value = _at(mapping, *path)
    # Pulumi carries numbers as doubles: infra/day2/previous_outputs.py checked it is a whole number.
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def last_deploy(outputs: Mapping[str, Any] | None) -> LastDeploy:
    """Reads the stack's previous outputs (``pulumi:pulumi:readStackOutputs``; the plan's ``outputs.json``)."""
    outputs = outputs or {}
    cluster = outputs.get(OUTPUT_NAME)
    if not isinstance(cluster, Mapping):
        return LastDeploy()
    pools = cluster.get("nodePools")
    shards = frozenset(
        shard["name"]
        for pool in (pools.values() if isinstance(pools, Mapping) else ())
        if isinstance(pool, Mapping)
        for shard in (pool.get("shards") or ())
        if isinstance(shard, Mapping) and isinstance(shard.get("name"), str)
    )
    rollout = outputs.get(ROLLOUT_OUTPUT)
    machines = None
    if isinstance(rollout, Mapping) and isinstance(rollout.get("machines"), Mapping):
        machines = {
            role: tuple(state for state in map(MachineState.parse, records or ()) if state)
            for role, records in rollout["machines"].items()
            if isinstance(records, list)
        }
    return LastDeploy(
        machines=machines,
        apiserver_scale_set=MachineState.parse(_at(rollout, APISERVER_SCALE_SET_RECORD)),
        node_kubernetes_version=_text(rollout, "nodeKubernetesVersion"),
        node_machine_image_version=_text(rollout, "nodeMachineImageVersion"),
        built_image_version=_text(outputs, MACHINE_IMAGES_OUTPUT, "version"),
        monitoring_node_shards=_count(outputs, MONITORING_OUTPUT, "nodeShards"),
        cluster_name=_text(cluster, "clusterName"),
        location=_text(cluster, "location"),
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
    "clusterName": (
        ("every Azure name derives from it: each resource would be replaced, etcd and the pools with them"),
        _NEW_CLUSTER,
    ),
    LOCATION_KEY: ("Azure resources cannot move regions: everything would be re-created", _NEW_CLUSTER),
    "network.serviceCidr": (
        (
            "running apiservers (their cloud-init is ignored), every Service's ClusterIP and "
            "every pod's DNS keep the old range while nodes move to the new one: a cluster-wide "
            "DNS outage"
        ),
        _NEW_CLUSTER,
    ),
    "network.addressSpace": (
        ("every subnet holding NICs would move (Azure refuses a subnet prefix change while it holds NICs)"),
        _NEW_CLUSTER,
    ),
}


def _current(config: ClusterConfig) -> dict[str, str]:
    return {
        "clusterName": config.cluster_name,
        LOCATION_KEY: config.location,
        "network.serviceCidr": str(config.network.service_cidr),
        "network.addressSpace": str(config.network.address_space),
    }


def _previous(last: LastDeploy) -> dict[str, str | None]:
    return {
        "clusterName": last.cluster_name,
        LOCATION_KEY: last.location,
        "network.serviceCidr": last.service_cidr,
        "network.addressSpace": last.address_space,
    }


def check_live_changes(last: LastDeploy, config: ClusterConfig) -> None:
    """Refuses, before anything is declared, a change the live cluster cannot take."""
    if not last.exists:
        return
    now, before = _current(config), _previous(last)
    for key, (why, rebuild) in REFUSED.items():
        if before[key] is not None and now[key] != before[key]:
            raise ConfigError(
                key,
                now[key],
                f"{before[key]!r} as in the last deploy: it cannot change on a "
                f"live cluster ({why}); to change it, {rebuild} (docs/day2.md)",
            )


# --------------------------------------------------------------------------- staged: one machine per deploy

# Changes rolled one machine per deploy by ``stage`` (called by infra/assembly/desired_cluster.py for apiservers and
# NAT hosts) and,
# for nodes, held back until the apiservers are done (``node_kubernetes_version``). docs/day2.md has a row each.
STAGED: dict[str, str] = {
    "kubernetesVersion": "apiservers one per deploy, then node models, autoscaler and NAT hosts one per deploy",
    "controlPlane.vmSize": "one apiserver resized (restarted) per deploy",
    "network.natHosts.vmSize": "one NAT host replaced per deploy",
    "controlPlane (any cloud-init change)": "one apiserver replaced per deploy",
    "network.natHosts (any cloud-init change)": "one NAT host replaced per deploy",
}


@dataclass(frozen=True)
class Staged:
    state: MachineState  # what the machine runs once this deploy is done
    moves: bool  # this deploy replaces it (new cloud-init) or resizes it (restart)


class Lifecycle(Enum):
    """How a dedicated VM meets a change to its definition (cloud-init, machine image, size)."""

    # etcd: keeps its disk and runs on; a changed cloud-init only shows in its tag, and the runbook rolls
    # the change one member at a time (docs/runbooks/etcd-rolling-change.md). A resize is declared a
    # replacement, which its protection refuses.
    RUNBOOK = "runbook"
    # A staged role's VM this deploy leaves as it is (``stage``): its new cloud-init and image are ignored.
    HELD = "held"
    # The one VM of its role this deploy moves (``stage``): replaced with its new cloud-init or image
    # (Azure refuses either change in place), the old one deleted first (fixed name and address).
    ROLLED = "rolled"

    @staticmethod
    def of(staged: Staged) -> Lifecycle:
        return Lifecycle.ROLLED if staged.moves else Lifecycle.HELD


def stage(previous: Sequence[MachineState] | None, desired: Sequence[MachineState]) -> list[Staged]:
    """One machine of a role per deploy: the first (in index order) whose last-deployed state differs from the
    desired one moves to it; the others keep what they run. A machine the last deploy did not have is created
    as desired (nothing to take down). ``previous`` None: no record (a first deploy, or a stack deployed before
    records were kept): every machine is taken to run the desired state, and nothing moves."""
    if previous is None:
        return [Staged(want, False) for want in desired]
    staged, moved = [], False
    for index, want in enumerate(desired):
        had = previous[index] if index < len(previous) else None
        if had is None or had == want:
            staged.append(Staged(want, False))
        elif not moved:
            staged.append(Staged(want, True))
            moved = True
        else:
            staged.append(Staged(had, False))
    return staged


def previous_machines(last: LastDeploy, role: str) -> tuple[MachineState, ...] | None:
    return None if last.machines is None else last.machines.get(role, ())


# --------------------------------------------------------------------------- Kubernetes upgrades


def _version(text: str) -> tuple[int, int, int]:
    major, minor, patch = (int(part) for part in text.split("."))
    return major, minor, patch


def check_kubernetes_upgrade(last: LastDeploy, config: ClusterConfig) -> None:
    """Version skew (kubernetes.io/releases/version-skew-policy): never down, one minor at a time, and the next
    minor only once the last upgrade reached every apiserver and the nodes."""
    before, target = last.kubernetes_version, config.kubernetes_version
    if before is None:
        return
    old, new = _version(before), _version(target)
    if new < old:
        raise ConfigError(
            "kubernetesVersion",
            target,
            f"{before} or later: the cluster runs {before} and Kubernetes "
            f"is never downgraded (docs/day2.md, Kubernetes upgrades)",
        )
    if new[1] > old[1] + 1:
        raise ConfigError(
            "kubernetesVersion",
            target,
            f"1.{old[1]}.x or 1.{old[1] + 1}.x: one minor release at a time (docs/day2.md, Kubernetes upgrades)",
        )
    if new[1] > old[1]:
        behind = unfinished_upgrade(last)
        if behind:
            raise ConfigError(
                "kubernetesVersion",
                target,
                f"{before} until its rollout is finished ({behind}): deploy again without changing "
                f"the version until every apiserver and the nodes run it (docs/day2.md)",
            )


def unfinished_upgrade(last: LastDeploy) -> str | None:
    """What does not yet run the last deploy's target version, or None."""
    target = last.kubernetes_version
    behind = apiservers_behind(last, target) if target else None
    if behind:
        return behind
    if last.node_kubernetes_version not in (None, target):
        return f"nodes still on {last.node_kubernetes_version}"
    return None


def apiservers_behind(last: LastDeploy, target: str) -> str | None:
    """Why not every apiserver runs ``target`` yet, or None. The individual VMs (a stack before the scale set,
    or one retiring them) by the program's record of each; the scale set by its model and by how far Azure has
    rolled it out (``RollingUpgrade``, read before the deploy): the rollout runs after the deploy returns, so
    only Azure knows when it is done."""
    vms = previous_machines(last, APISERVER_ROLE) or ()
    lagging = [str(i) for i, m in enumerate(vms) if m.kubernetes_version != target]
    if lagging:
        return f"apiservers {', '.join(lagging)} not yet on {target}"
    scale_set = last.apiserver_scale_set
    if scale_set is None:
        return None
    if scale_set.kubernetes_version != target:
        return f"the apiserver scale set's model is on {scale_set.kubernetes_version}, not {target}"
    if last.apiserver_rolling_upgrade is None:
        return "the apiserver scale set's rolling upgrade state could not be read"
    return last.apiserver_rolling_upgrade.unfinished()


def node_kubernetes_version(last: LastDeploy, config: ClusterConfig) -> str:
    """The release nodes (scale set models, NAT hosts) and the cluster-autoscaler get: the target only once the
    last deploy left every apiserver on it (a kubelet or autoscaler may never be newer than an apiserver);
    until then, what the nodes already run."""
    target = config.kubernetes_version
    vms = previous_machines(last, APISERVER_ROLE)
    if vms is None or last.node_kubernetes_version is None:
        return target
    if last.apiserver_scale_set is None:  # the apiservers were the config's VMs, each recorded
        on_target = len(vms) >= config.control_plane.apiservers and all(
            m.kubernetes_version == target for m in vms[: config.control_plane.apiservers]
        )
    else:
        on_target = apiservers_behind(last, target) is None
    return target if on_target else last.node_kubernetes_version


def node_machine_image_version(last: LastDeploy, config: ClusterConfig, node_version: str) -> str:
    """The machine image version nodes (scale-set models) and NAT hosts boot. An image carries one release's
    binaries (``kubernetesVersion``'s, infra/assembly/machine_image.py) and a booting node checks them against its own
    (infra/node/install.py): while nodes stay on the old release (``node_kubernetes_version``), they keep the
    image they booted, and take ``machineImageVersion`` together with the new release. Image Builder's versions
    outlive their templates in the gallery, so the old one is still there. A stack whose rollout record predates
    this field falls back to what its last deploy built."""
    if node_version == config.kubernetes_version:
        return config.machine_image_version
    return last.node_machine_image_version or last.built_image_version or config.machine_image_version
