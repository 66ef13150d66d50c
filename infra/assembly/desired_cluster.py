"""The whole desired cluster, assembled once, before any resource is declared.

``assemble`` is a pure function of the stack's raw config and the last deploy's outputs. It validates
the config, refuses a change the live cluster cannot take (the day-2 rules and the checks against the
last deploy: a pool dropped unretired, etcd resized by more than one member, a scale set moved, a machine
image version rebuilt with other contents), decides the control plane's and the nodes' versions, renders
every machine's cloud-init (so the size Azure would refuse is checked on the exact text a machine
receives), stages the rollout of the apiservers and NAT hosts, and builds the add-on objects. Any
``ConfigError`` stops the program here, with nothing declared.

``__main__.py`` (and through it the offline plan) and the tests call it; each component receives its
slice (``machines_of``, ``shards_of``, ``addons``) and only declares resources. A whole-cluster check
is a function of the ``Cluster`` this returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from infra.addons import AzureAccess, build_addon_objects
from infra.addons.k8s import Obj
from infra.assembly import machine_image
from infra.boot.cloudinit import custom_data, fingerprint, render, rendered
from infra.cluster.cluster_spec import ClusterSpec, RollingUpgradeReader, build_cluster_spec
from infra.cluster.node_checks import check_nodes
from infra.config import naming
from infra.config.cluster_config import NodePoolConfig
from infra.config.errors import ConfigError
from infra.config.sizing import Shard, shards
from infra.contract import OUTPUT_NAME
from infra.control_plane.apiserver_machine import ZONES as APISERVER_ZONES
from infra.control_plane.apiserver_machine import apiserver_cloud_config
from infra.day2.deploy_rules import APISERVER_ROLE, NAT_HOST_ROLE, Lifecycle, MachineState, previous_machines, stage
from infra.day2.node_group import check_scale_sets_stay
from infra.day2.pool_retirement import check_pool_removals
from infra.etcd.member_machine import member_cloud_init
from infra.etcd.membership_change import check_member_changes
from infra.etcd.spec import EVENTS, MAIN, EtcdClusterSpec, apiserver_etcd_flags, etcd_cluster_spec
from infra.facts import roles
from infra.facts.roles import Role
from infra.nat_hosts import nat_host_cloud_config
from infra.network import traffic_counters
from infra.network.addressing import AZURE_RESERVED_PER_SUBNET
from infra.node import node_cloud_configs
from infra.node.pool import check_custom_data, node_spec, scale_set_tags


class DeployTime(Enum):
    """A value only the deploy knows, left as a marker in the add-on objects (the cluster autoscaler's Azure
    access); ``components/addons.py`` puts the deploy's value in its place."""

    SUBSCRIPTION_ID = "subscriptionId"
    AUTOSCALER_CLIENT_ID = "autoscalerClientId"


@dataclass(frozen=True)
class DedicatedMachine:
    """One VM the program declares by itself (an etcd member, an apiserver, a NAT host)."""

    role: Role
    index: int
    name: str  # its Azure name and hostname
    address: str  # its static private IP
    zone: str | None
    cloud_init: str  # what this deploy renders for it (no secret in it)
    custom_data: str  # that cloud-init as Azure's customData
    # What it runs once this deploy is done: a HELD machine keeps its last deploy's cloud-init (the
    # fingerprint its tag and rollout record carry), size, release and image.
    state: MachineState
    lifecycle: Lifecycle  # the rollout decision (infra/day2/deploy_rules.py)

    @property
    def size(self) -> str:
        return self.state.vm_size

    @property
    def image_version(self) -> str:
        return self.state.image_version

    @property
    def fingerprint(self) -> str:
        return self.state.cloud_init

    def record(self) -> dict[str, str]:
        """Its entry in the ``rollout`` output, which the next deploy stages from."""
        return self.state.record(self.name)


@dataclass(frozen=True)
class ApiserverScaleSet:
    """The apiservers: one scale set that heals and rolls itself (infra/control_plane/scale_set.py)."""

    name: str  # its Azure name
    computer_name_prefix: str
    capacity: int  # ``controlPlane.apiservers``: always sent (no autoscaler owns it)
    zones: tuple[str, ...]
    cloud_init: str  # every instance's (the same on each: address and certificate are decided at boot)
    custom_data: str
    state: MachineState  # its model: cloud-init, size, release, image (the ``rollout`` output's record)

    def record(self) -> dict[str, str]:
        return self.state.record(self.name)


@dataclass(frozen=True)
class ScaleSetShard:
    """One scale set of a node pool."""

    pool: NodePoolConfig
    shard: Shard
    cloud_init: str
    custom_data: str
    fingerprint: str
    tags: Mapping[str, str]
    image_kind: str  # the machine image its nodes boot (infra/assembly/machine_image.py)
    # ``sku.capacity``, sent only when the scale set is created (the last deploy did not list it); afterwards
    # the cluster autoscaler owns the capacity, which a deploy never sends back (docs/day2.md).
    capacity: int | None


@dataclass(frozen=True)
class Cluster:
    spec: ClusterSpec  # config, address plan, add-on settings, the last deploy, the nodes' release and image
    etcd: Mapping[str, EtcdClusterSpec]  # MAIN and EVENTS
    # etcd members, NAT hosts and, on a stack moving to the scale set, the apiserver VMs it still has
    machines: tuple[DedicatedMachine, ...]
    apiservers: ApiserverScaleSet
    shards: tuple[ScaleSetShard, ...]
    addons: Mapping[str, list[Obj]]  # every enabled add-on's objects, by group (infra/addons)

    @property
    def control_plane_version(self) -> str:
        """The release the apiservers are rolled to (``kubernetesVersion``)."""
        return self.spec.config.kubernetes_version

    @property
    def node_version(self) -> str:
        """The release node models, NAT hosts and the autoscaler run (it follows the apiservers,
        infra/day2/deploy_rules.py)."""
        return self.spec.node_kubernetes_version

    def machines_of(self, role: Role) -> tuple[DedicatedMachine, ...]:
        return tuple(machine for machine in self.machines if machine.role == role)

    def shards_of(self, pool: NodePoolConfig) -> tuple[ScaleSetShard, ...]:
        return tuple(shard for shard in self.shards if shard.pool.name == pool.name)

    def rollout(self) -> dict[str, list[dict[str, str]]]:
        """The rolled machines' records, by machine role (the ``rollout`` output's ``machines``): the NAT hosts
        and the apiserver VMs not yet retired (the scale set's model is ``apiservers.record()``)."""
        return {
            role.machine: [machine.record() for machine in self.machines_of(role)]
            for role in (roles.APISERVER, roles.NAT_HOST)
        }


def assemble(
    raw: Mapping[str, Any],
    location: Any,
    previous_outputs: Mapping[str, Any] | None = None,
    read_rolling_upgrade: RollingUpgradeReader | None = None,
) -> Cluster:
    """``previous_outputs``: the stack's outputs from its last deploy (``{}``/None before the first);
    ``read_rolling_upgrade``: where the apiserver scale set's rollout stands (``build_cluster_spec``)."""
    spec = build_cluster_spec(raw, location, previous_outputs, read_rolling_upgrade)
    check_last_deploy(spec, previous_outputs or {})
    etcd = {role: etcd_cluster_spec(spec, role) for role in (MAIN, EVENTS)}
    addons = build_addon_objects(
        spec.config,
        spec.addresses,
        spec.addons,
        AzureAccess(
            subscription_id=DeployTime.SUBSCRIPTION_ID,
            resource_group=naming.node_resource_group(spec.config.cluster_name),
            identity_client_id=DeployTime.AUTOSCALER_CLIENT_ID,
        ),
        node_kubernetes_version=spec.node_kubernetes_version,
    )
    # Host ports, pod budget and the cluster as a whole (infra/cluster/whole_cluster.py), from what every node and
    # add-on renders; kubelet's maxPods counts each pool's host-network DaemonSet pods.
    host_network_pods = check_nodes(spec.config, spec.addresses, spec.addons, addons, spec.node_kubernetes_version)
    apiservers = _apiserver_scale_set(spec, etcd)
    return Cluster(
        spec=spec,
        etcd=etcd,
        machines=(*_etcd_members(spec, etcd), *_retiring_apiserver_vms(spec, apiservers), *_nat_hosts(spec)),
        apiservers=apiservers,
        shards=_shards(spec, host_network_pods),
        addons=addons,
    )


def check_last_deploy(spec: ClusterSpec, previous: Mapping[str, Any]) -> None:
    """What the last deploy's outputs forbid besides the day-2 rules: a pool may leave the config only if the
    last deploy retired it, an etcd cluster changes by one member per deploy, no scale set moves into the node
    resource group, and a machine image version is never rebuilt with other contents."""
    config = spec.config
    check_pool_removals(previous.get(OUTPUT_NAME), config)
    check_member_changes(previous, config)
    check_scale_sets_stay(previous.get(OUTPUT_NAME), config.cluster_name)
    machine_image.check_version_not_reused(previous.get(machine_image.OUTPUT_NAME), config)


def _etcd_members(spec: ClusterSpec, etcd: Mapping[str, EtcdClusterSpec]) -> list[DedicatedMachine]:
    config = spec.config
    vault_name = naming.key_vault(config.cluster_name)
    found = []
    for role in (roles.ETCD, roles.EVENTS_ETCD):
        cluster = etcd[role.machine]
        for member in cluster.members:
            text = member_cloud_init(cluster, member, vault_name)
            state = MachineState(
                fingerprint(text), cluster.config.vm_size, config.kubernetes_version, config.machine_image_version
            )
            found.append(
                DedicatedMachine(
                    role, member.index, member.name, member.ip, member.zone, text,
                    custom_data(text, member.name), state, Lifecycle.RUNBOOK,
                )
            )  # fmt: skip
    return found


def _apiserver_scale_set(spec: ClusterSpec, etcd: Mapping[str, EtcdClusterSpec]) -> ApiserverScaleSet:
    """One model for every apiserver, at the config's release, size and image: Azure rolls a change out one
    instance at a time (infra/control_plane/scale_set.py)."""
    config = spec.config
    text = render(apiserver_cloud_config(spec, apiserver_etcd_flags(etcd[MAIN], etcd[EVENTS])))
    name = naming.apiserver_scale_set(config.cluster_name)
    return ApiserverScaleSet(
        name=name,
        computer_name_prefix=naming.apiserver_computer_name_prefix(config.cluster_name),
        capacity=config.control_plane.apiservers,
        zones=APISERVER_ZONES,
        cloud_init=text,
        custom_data=custom_data(text, name),
        state=MachineState(
            fingerprint(text), config.control_plane.vm_size, config.kubernetes_version, config.machine_image_version
        ),
    )


def _retiring_apiserver_vms(spec: ClusterSpec, apiservers: ApiserverScaleSet) -> list[DedicatedMachine]:
    """A stack deployed with individual apiserver VMs moves to the scale set without losing its control plane
    (docs/day2.md): the deploy that creates the scale set keeps every VM as it is, beside it in the load
    balancer's pool; each deploy after it removes one VM, the last first, while the scale set serves. Each VM
    keeps what it runs (HELD: its cloud-init, image and size as recorded). A stack from before the ``rollout``
    record has the config's count of VMs, taken to run what the config wants."""
    last = spec.last_deploy
    if not last.exists:
        return []
    recorded = previous_machines(last, APISERVER_ROLE)
    if recorded is None:
        recorded = (apiservers.state,) * spec.config.control_plane.apiservers
    if last.apiserver_scale_set is None and recorded:
        _check_room_beside(spec, len(recorded), apiservers.capacity)
    keep = len(recorded) - (1 if last.apiserver_scale_set is not None and recorded else 0)
    cluster, ips = spec.config.cluster_name, spec.addresses.apiserver_ips(len(recorded))
    return [
        DedicatedMachine(
            roles.APISERVER, index, naming.apiserver(cluster, index), ips[index],
            APISERVER_ZONES[index % len(APISERVER_ZONES)], apiservers.cloud_init,
            custom_data(apiservers.cloud_init, naming.apiserver(cluster, index)), recorded[index], Lifecycle.HELD,
        )
        for index in range(keep)
    ]  # fmt: skip


def _check_room_beside(spec: ClusterSpec, vms: int, capacity: int) -> None:
    """The scale set is created beside the VMs, in the same subnet: refused, before anything is declared, when
    both do not fit in it (Azure keeps AZURE_RESERVED_PER_SUBNET addresses; the load balancer frontend takes one)."""
    subnet = spec.addresses.subnet(roles.APISERVER.subnet).cidr
    room = subnet.num_addresses - AZURE_RESERVED_PER_SUBNET - 1 - vms
    if capacity > room:
        raise ConfigError(
            "controlPlane.apiservers",
            capacity,
            f"at most {room} while the stack moves from its {vms} apiserver VMs to the scale set (both share "
            f"{subnet}): move with at most {room}, then raise it once the VMs are retired (docs/day2.md)",
        )


def _nat_hosts(spec: ClusterSpec) -> list[DedicatedMachine]:
    """One cloud-init for every host (nothing in it is host-specific), with the nodes' release and image; rolled
    one host per deploy (infra/day2/deploy_rules.py): the others keep serving flows behind the load balancer."""
    config, addresses = spec.config, spec.addresses
    text = render(
        nat_host_cloud_config(
            config, addresses, naming.key_vault(config.cluster_name), kubernetes_version=spec.node_kubernetes_version
        )
    )
    encoded = custom_data(text, f"{config.cluster_name} NAT hosts' cloud-init")
    want = MachineState(
        fingerprint(text),
        config.network.nat_hosts.vm_size,
        spec.node_kubernetes_version,
        spec.node_machine_image_version,
    )
    ips = addresses.nat_host_ips(config.network.nat_hosts.count)
    staged = stage(previous_machines(spec.last_deploy, NAT_HOST_ROLE), [want] * len(ips))
    return [
        DedicatedMachine(
            roles.NAT_HOST, index, naming.nat_host(config.cluster_name, index), ip, None, text, encoded,
            s.state, Lifecycle.of(s),
        )
        for index, (ip, s) in enumerate(zip(ips, staged, strict=True))
    ]  # fmt: skip


def _shards(spec: ClusterSpec, host_network_pods: Mapping[str, int]) -> tuple[ScaleSetShard, ...]:
    """Every pool's scale sets, with the nodes' release. Shards differ only in their nodes' InfiniBand domain:
    a pool without InfiniBand is rendered once, an InfiniBand pool's shards are relabelled from its first
    (``node_cloud_configs``). ``host_network_pods``: by pool (``check_nodes``)."""
    config, addresses = spec.config, spec.addresses
    vault_name = naming.key_vault(config.cluster_name)
    registry = naming.container_registry_login_server(config.cluster_name)
    boot_steps = traffic_counters.boot_steps(config, addresses)
    found = []
    for index, pool in enumerate(config.node_pools):
        pool_shards = shards(pool)
        specs = [
            node_spec(
                config,
                addresses,
                pool,
                shard,
                kubernetes_version=spec.node_kubernetes_version,
                vault_name=vault_name,
                registry_login_server=registry,
                host_network_pods=host_network_pods[pool.name],
            )
            for shard in (pool_shards if pool.infiniband else pool_shards[:1])
        ]
        parts = [rendered(cloud) for cloud in node_cloud_configs(specs, boot_steps)]
        for text, _ in parts:
            check_custom_data(config, index, text)
        for shard, (text, items) in zip(
            pool_shards, parts if pool.infiniband else parts * len(pool_shards), strict=True
        ):
            digest = fingerprint(text)
            found.append(
                ScaleSetShard(
                    pool=pool,
                    shard=shard,
                    cloud_init=text,
                    custom_data=custom_data(text, f"node pool {pool.name} shard {shard.name}", items),
                    fingerprint=digest,
                    tags=scale_set_tags(config, pool, shard, digest),
                    image_kind=machine_image.kind_of_pool(pool),
                    capacity=None if shard.name in spec.last_deploy.scale_sets else shard.min_nodes,
                )
            )
    return tuple(found)
