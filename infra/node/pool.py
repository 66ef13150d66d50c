"""A configured node pool turned into what its scale sets need: the node's spec, the VM model, the tags.

Pure decisions only; components/node_pool.py maps them onto azure-native resources.
One cloud-init per shard (scale set), rendered once: the shards of a pool differ only in the
InfiniBand domain label their nodes register with (InfiniBand pools; every shard of a CPU pool gets
the same text).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from infra.addons.node_local_dns import node_local_ip
from infra.boot.cloudinit import MAX_CUSTOM_DATA_BASE64_CHARS
from infra.catalog import versions
from infra.catalog.vm_sizes import VmSize
from infra.config import naming
from infra.config.cluster_config import ClusterConfig, NodePoolConfig, Taint
from infra.config.errors import ConfigError
from infra.config.sizing import Shard, shards
from infra.facts import roles, tags
from infra.facts.endpoints import apiserver_url
from infra.facts.labels import CLOUD_IDENTITY_UID, GPU_RESOURCE, MONITORING_ROLE, POOL_LABEL, ROLE_SYSTEM, node_labels
from infra.network.addressing import AddressPlan, pod_ip_configurations
from infra.network.security_groups import monitoring_pools, monitoring_subnets
from infra.node import NodeSpec
from infra.node.state_disk import LocalDisks

# OS disk of every node; only the OS lives there (kubelet and containerd state are on the local SSD).
OS_DISK_GB = 128
# Azure allows at most 50 tags on a resource
# (learn.microsoft.com/azure/azure-resource-manager/management/tag-resources, "Limitations").
MAX_TAGS = 50


def node_spec(
    config: ClusterConfig,
    addresses: AddressPlan,
    pool: NodePoolConfig,
    shard: Shard,
    *,
    kubernetes_version: str,
    vault_name: str,
    registry_login_server: str,
    host_network_pods: int,
) -> NodeSpec:
    """``kubernetes_version``: the nodes' release, which follows the apiservers' (infra/day2/deploy_rules.py).
    ``host_network_pods``: the host-network DaemonSet pods on the pool's nodes (infra/cluster/node_checks.py).
    kubelet counts them against ``maxPods`` though they take no pod IP: maxPods is the pod IPs plus them."""
    return joining_node(
        config,
        addresses,
        pool.size,
        kubernetes_version=kubernetes_version,
        role=roles.NODE_IDENTITY,
        vault_name=vault_name,
        registry_login_server=registry_login_server,
        images=preload_images(config),
        max_pods=pod_ip_configurations(pool) + host_network_pods,
        labels=pool_labels(config, pool, shard),
        taints=pool.taints,
        infiniband=pool.infiniband,
        identity_uids=(0, CLOUD_IDENTITY_UID) if pool.role == ROLE_SYSTEM else (0,),
        monitoring_sources=(
            monitoring_subnets(addresses, monitoring_pools(config)) if pool.role == MONITORING_ROLE else ()
        ),
    )


def joining_node(
    config: ClusterConfig,
    addresses: AddressPlan,
    size: VmSize,
    *,
    kubernetes_version: str,
    role: str,
    vault_name: str,
    registry_login_server: str,
    images: tuple[str, ...],
    max_pods: int,
    labels: Mapping[str, str],
    taints: tuple[Taint, ...],
    infiniband: bool = False,
    identity_uids: tuple[int, ...] = (0,),
    monitoring_sources: tuple[str, ...] = (),
) -> NodeSpec:
    """A machine that joins the cluster as a node: a pool's scale-set instance or a NAT host (``role``
    names the identity its boot scripts sign in as)."""
    return NodeSpec(
        kubernetes_version=kubernetes_version,
        apiserver_endpoint=apiserver_url(addresses.apiserver_lb_ip()),
        cluster_dns=addresses.dns_service_ip,
        cluster_cidr=str(config.network.address_space),
        vault_name=vault_name,
        identity=naming.role_identity_below_subscription(config.cluster_name, role),
        registry_login_server=registry_login_server,
        images=images,
        local_disks=LocalDisks.of(size),
        vcpus=size.vcpus,
        max_pods=max_pods,
        labels=labels,
        taints=taints,
        gpus=size.gpus,
        # The 8-GPU ND sizes are NVSwitch systems, which need NVIDIA's fabric manager.
        nvswitch=size.gpus >= 8,
        infiniband=infiniband,
        node_local_dns_ip=node_local_ip(config),
        identity_uids=identity_uids,
        monitoring_sources=monitoring_sources,
    )


def preload_images(config: ClusterConfig) -> tuple[str, ...]:
    """The pause image first (it is containerd's sandbox image), then ``images.preload``."""
    return tuple(dict.fromkeys((versions.PAUSE_IMAGE, *config.images.preload)))


def pool_labels(config: ClusterConfig, pool: NodePoolConfig, shard: Shard) -> dict[str, str]:
    """The labels every node of the shard registers with (infra.facts.labels decides them; GPU labels come
    with the VM size, the InfiniBand domain with the shard)."""
    return node_labels(
        role=pool.role,
        pool=pool.name,
        instance_type=pool.vm_size,
        region=config.location,
        infiniband=pool.infiniband,
        infiniband_domain=infiniband_domain(shard),
        gpus=pool.size.gpus,
        extra=pool.labels,
    )


def infiniband_domain(shard: Shard) -> str:
    """A shard's InfiniBand domain: its name (``<pool>-s<NNN>``), unique in the cluster, stable for the
    shard's life (shards are only ever appended) and a valid label value (pool names are at most 12
    characters). The scale set's Azure name is ``naming.scale_set(cluster, shard.name)``."""
    return shard.name


def ephemeral_os_disk(pool: NodePoolConfig) -> bool:
    """An ephemeral OS disk on the temp disk, when the temp disk holds it and is not the node's
    state disk (sizes with NVMe keep state there; on temp-disk-only sizes the state needs all of it)."""
    size = pool.size
    return size.nvme_disks > 0 and size.temp_disk_gib >= OS_DISK_GB


@dataclass(frozen=True)
class ScaleSetShape:
    """The placement settings Azure's limits impose on one shard."""

    single_placement_group: bool
    platform_fault_domain_count: int | None

    @classmethod
    def of(cls, pool: NodePoolConfig) -> ScaleSetShape:
        # InfiniBand needs a single placement group (at most 100 VMs) and one fault domain; everything
        # else uses large scale sets (up to 1,000 VMs) with Azure's default spreading (infra/config/sizing.py).
        if pool.infiniband:
            return cls(single_placement_group=True, platform_fault_domain_count=1)
        return cls(single_placement_group=False, platform_fault_domain_count=None)


def encode_tag_key(key: str) -> str:
    """cluster-autoscaler's encoding: '/' is not allowed in an Azure tag name, so '_' stands for it
    and '~2' for a literal '_' (azure_template.go extractLabelsFromTags)."""
    return key.replace("_", "~2").replace("/", "_")


def autoscaler_tags(config: ClusterConfig, pool: NodePoolConfig, shard: Shard) -> dict[str, str]:
    """Auto-discovery (enabled, cluster name, min, max) and the node template for scaling from zero.
    The GPU start-up taint is left out: the autoscaler treats it as a start-up taint, not a lasting one."""
    scale_set_tags = {
        **tags.autoscaler_discovery(config.cluster_name),
        tags.AUTOSCALER_MIN: str(shard.min_nodes),
        tags.AUTOSCALER_MAX: str(shard.max_nodes),
    }
    for key, value in sorted(pool_labels(config, pool, shard).items()):
        scale_set_tags[tags.LABEL_PREFIX + encode_tag_key(key)] = value
    for taint in pool.taints:
        scale_set_tags[tags.TAINT_PREFIX + encode_tag_key(taint.key)] = f"{taint.value}:{taint.effect}"
    if pool.size.gpus:
        scale_set_tags[tags.RESOURCES_PREFIX + encode_tag_key(GPU_RESOURCE)] = str(pool.size.gpus)
    return scale_set_tags


def scale_set_tags(
    config: ClusterConfig, pool: NodePoolConfig, shard: Shard, cloud_init_fingerprint: str
) -> dict[str, str]:
    return {
        **autoscaler_tags(config, pool, shard),
        encode_tag_key(POOL_LABEL): pool.name,
        tags.CLOUD_INIT: cloud_init_fingerprint,  # a changed node model shows in the preview
    }


def check_pool_tags(config: ClusterConfig) -> None:
    """Refuses, before anything is declared, a pool whose scale sets would carry more tags than Azure allows."""
    for i, pool in enumerate(config.node_pools):
        count = len(scale_set_tags(config, pool, shards(pool)[0], ""))
        if count > MAX_TAGS:
            raise ConfigError(
                f"nodePools[{i}].labels",
                dict(pool.labels),
                f"fewer labels and taints: each becomes a scale-set tag for the autoscaler and "
                f"the pool's scale sets would carry {count} tags, over Azure's {MAX_TAGS}",
            )


def custom_data_size(text: str) -> int:
    """Base64 characters Azure counts for this cloud-init (4 for every 3 bytes, padded)."""
    return 4 * -(-len(text.encode()) // 3)


def check_custom_data(config: ClusterConfig, index: int, cloud_init: str) -> None:
    """Refuses, before anything is declared, a pool whose nodes' cloud-init would not fit Azure's customData."""
    pool = config.node_pools[index]
    size = custom_data_size(cloud_init)
    if size > MAX_CUSTOM_DATA_BASE64_CHARS:
        # The preload list is the only part of a node's cloud-init that grows without a bound of its own
        # (labels and taints are bounded by the scale set's 50 tags).
        key, value = (
            ("images.preload", list(config.images.preload))
            if config.images.preload
            else (f"nodePools[{index}].labels", dict(pool.labels))
        )
        raise ConfigError(
            key,
            value,
            f"fewer or shorter entries: the {pool.name} nodes' cloud-init would be {size:,} base64 "
            f"characters, over Azure's customData limit of {MAX_CUSTOM_DATA_BASE64_CHARS:,}",
        )
