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
from infra.boot.cloudinit import custom_data, fingerprint, render
from infra.cluster.cluster_spec import ClusterSpec, build_cluster_spec
from infra.cluster.node_checks import check_nodes
from infra.config import naming
from infra.config.cluster_config import NodePoolConfig
from infra.config.sizing import Shard, shards
from infra.contract import OUTPUT_NAME
from infra.control_plane.apiserver_machine import apiserver_machines
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
    machines: tuple[DedicatedMachine, ...]
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
        """The rolled machines' records, by machine role (the ``rollout`` output's ``machines``)."""
        return {
            role.machine: [machine.record() for machine in self.machines_of(role)]
            for role in (roles.APISERVER, roles.NAT_HOST)
        }


def assemble(raw: Mapping[str, Any], location: Any, previous_outputs: Mapping[str, Any] | None = None) -> Cluster:
    """``previous_outputs``: the stack's outputs from its last deploy (``{}``/None before the first)."""
    spec = build_cluster_spec(raw, location, previous_outputs)
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
    return Cluster(
        spec=spec,
        etcd=etcd,
        machines=(*_etcd_members(spec, etcd), *_apiservers(spec, etcd), *_nat_hosts(spec)),
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


def _apiservers(spec: ClusterSpec, etcd: Mapping[str, EtcdClusterSpec]) -> list[DedicatedMachine]:
    """Rolled one per deploy (infra/day2/deploy_rules.py): a new cloud-init (a Kubernetes release, a flag), size or
    machine
    image reaches the first VM that lacks it; the others keep running what they run."""
    config = spec.config
    rendered = apiserver_machines(spec, apiserver_etcd_flags(etcd[MAIN], etcd[EVENTS]))
    want = [
        MachineState(
            m.fingerprint, config.control_plane.vm_size, config.kubernetes_version, config.machine_image_version
        )
        for m in rendered
    ]
    staged = stage(previous_machines(spec.last_deploy, APISERVER_ROLE), want)
    return [
        DedicatedMachine(
            roles.APISERVER, m.index, m.vm_name, m.ip, m.zone, m.cloud_init, m.custom_data, s.state, Lifecycle.of(s)
        )
        for m, s in zip(rendered, staged, strict=True)
    ]


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
        texts = [render(cloud) for cloud in node_cloud_configs(specs, boot_steps)]
        for text in texts:
            check_custom_data(config, index, text)
        for shard, rendered in zip(pool_shards, texts if pool.infiniband else texts * len(pool_shards), strict=True):
            digest = fingerprint(rendered)
            found.append(
                ScaleSetShard(
                    pool=pool,
                    shard=shard,
                    cloud_init=rendered,
                    custom_data=custom_data(rendered, f"node pool {pool.name} shard {shard.name}"),
                    fingerprint=digest,
                    tags=scale_set_tags(config, pool, shard, digest),
                    image_kind=machine_image.kind_of_pool(pool),
                    capacity=None if shard.name in spec.last_deploy.scale_sets else shard.min_nodes,
                )
            )
    return tuple(found)
