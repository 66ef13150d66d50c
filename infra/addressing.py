"""The address plan: which VNet and subnet every machine and pod address comes from.

Pods get real VNet addresses (alias IPs: ``1 + podIpsPerNode`` IP configurations on
every node NIC), so every pod address counts against Azure's private-IP limits.

Layout (never reordered, only appended to, so a re-plan moves nothing):
- ``network.addressSpace`` is cut into 64 equal blocks. Block 0 is the *system* VNet
  (etcd, events etcd, apiservers, NAT hosts, private endpoints), in the fixed order of
  ``SYSTEM_SUBNETS``. Block ``addressSlot`` is the VNet of that node pool.
- Inside a pool's block, shard ``i`` of the pool owns the ``i``-th subnet sized for a
  full shard (``capacity x (1 + podIpsPerNode)`` plus Azure's 5 reserved addresses), so
  growing the pool only appends subnets.
- All cluster VNets are peered in a full mesh (pods reach pods directly) and to the hub.
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass

from infra.config import ADDRESS_BLOCKS, ClusterConfig, NodePoolConfig
from infra.errors import ConfigError
from infra.sizing import shards

# Azure reserves 5 addresses in every subnet: network, gateway, 2 for Azure DNS, broadcast
# (learn.microsoft.com/azure/virtual-network/virtual-networks-faq, "reserved IP addresses").
AZURE_RESERVED_PER_SUBNET = 5
# First usable host offset in a subnet (.0-.3 are reserved by Azure).
FIRST_HOST_OFFSET = 4
# System subnets, in their fixed order inside block 0; each is a /27 (32 addresses),
# enough for 7 etcd members or 15 apiservers plus a load balancer frontend.
SYSTEM_SUBNETS = ("etcd", "events-etcd", "apiserver", "nat", "endpoints")
SYSTEM_SUBNET_PREFIX = 27


@dataclass(frozen=True)
class SubnetPlan:
    key: str  # stable identity: a system subnet name or a shard name such as "h100a-s003"
    vnet: str  # key of the VNet it lives in
    cidr: ipaddress.IPv4Network
    private_ips: int  # addresses it may consume at full size (counted against Azure limits)

    def host(self, offset: int) -> str:
        """The ``offset``-th usable address (0 = the first address Azure lets us assign)."""
        address = self.cidr.network_address + FIRST_HOST_OFFSET + offset
        if address >= self.cidr.broadcast_address:
            raise ValueError(f"{self.key}: offset {offset} is outside {self.cidr}")
        return str(address)


@dataclass(frozen=True)
class VnetPlan:
    key: str  # "system" or the pool name
    address_space: ipaddress.IPv4Network
    subnets: tuple[SubnetPlan, ...]

    @property
    def private_ips(self) -> int:
        return sum(subnet.private_ips for subnet in self.subnets)


@dataclass(frozen=True)
class AddressPlan:
    vnets: tuple[VnetPlan, ...]
    service_cidr: ipaddress.IPv4Network
    max_private_ips_per_vnet: int
    max_private_ips_per_peered_group: int

    @property
    def private_ips(self) -> int:
        return sum(vnet.private_ips for vnet in self.vnets)

    def vnet(self, key: str) -> VnetPlan:
        return next(v for v in self.vnets if v.key == key)

    def subnet(self, key: str) -> SubnetPlan:
        return next(s for v in self.vnets for s in v.subnets if s.key == key)

    # Static addresses. Offset 0 of a system subnet is its load balancer frontend where it has one.
    def etcd_ips(self, subnet_key: str, members: int) -> tuple[str, ...]:
        return tuple(self.subnet(subnet_key).host(i) for i in range(members))

    def apiserver_lb_ip(self) -> str:
        return self.subnet("apiserver").host(0)

    def apiserver_ips(self, count: int) -> tuple[str, ...]:
        return tuple(self.subnet("apiserver").host(1 + i) for i in range(count))

    def nat_lb_ip(self) -> str:
        return self.subnet("nat").host(0)

    def nat_host_ips(self, count: int) -> tuple[str, ...]:
        return tuple(self.subnet("nat").host(1 + i) for i in range(count))

    @property
    def kubernetes_service_ip(self) -> str:
        """The first service IP, which kube-apiserver takes for ``kubernetes.default``."""
        return str(self.service_cidr.network_address + 1)

    @property
    def dns_service_ip(self) -> str:
        """The cluster DNS service IP: by convention the tenth address of the service range."""
        return str(self.service_cidr.network_address + 10)


def plan_addresses(config: ClusterConfig) -> AddressPlan:
    network = config.network
    blocks = list(network.address_space.subnets(prefixlen_diff=int(math.log2(ADDRESS_BLOCKS))))
    vnets = [_system_vnet(blocks[0])]
    vnets += [_pool_vnet(pool, blocks[pool.address_slot], i) for i, pool in enumerate(config.node_pools)]
    plan = AddressPlan(tuple(vnets), network.service_cidr, network.max_private_ips_per_vnet,
                       network.max_private_ips_per_peered_group)
    _check_budgets(config, plan)
    return plan


def pod_ips(pool: NodePoolConfig) -> int:
    """Private IPs one node of the pool holds: its own plus one per pod IP configuration."""
    return 1 + pool.pod_ips_per_node


def _system_vnet(block: ipaddress.IPv4Network) -> VnetPlan:
    subnets = list(block.subnets(new_prefix=SYSTEM_SUBNET_PREFIX))
    planned = tuple(
        SubnetPlan(key, "system", subnets[i], subnets[i].num_addresses) for i, key in enumerate(SYSTEM_SUBNETS)
    )
    return VnetPlan("system", block, planned)


def _pool_vnet(pool: NodePoolConfig, block: ipaddress.IPv4Network, index: int) -> VnetPlan:
    pool_shards = shards(pool)
    per_shard = pool_shards[0].capacity * pod_ips(pool) + AZURE_RESERVED_PER_SUBNET
    prefix = 32 - max(4, math.ceil(math.log2(per_shard)))
    key = f"nodePools[{index}]"
    if prefix < block.prefixlen:
        raise ConfigError(f"{key}.podIpsPerNode", pool.pod_ips_per_node,
                          f"fewer pod IPs per node: one {pool.name} scale set needs {per_shard} addresses "
                          f"but its address block {block} has {block.num_addresses}; "
                          f"or a larger network.addressSpace")
    room = 2 ** (prefix - block.prefixlen)
    if len(pool_shards) > room:
        raise ConfigError(f"{key}.maxNodes", pool.max_nodes,
                          f"at most {room * pool_shards[0].capacity} nodes: {len(pool_shards)} scale sets of "
                          f"/{prefix} do not fit the pool's address block {block}; split the pool or use a "
                          f"larger network.addressSpace")
    cidrs = list(block.subnets(new_prefix=prefix))
    planned = tuple(
        # Sized for a full shard (so it never has to move), counted at the shard's maxNodes
        # (the autoscaler never goes past it).
        SubnetPlan(shard.name, pool.name, cidrs[shard.index],
                   shard.max_nodes * pod_ips(pool) + AZURE_RESERVED_PER_SUBNET)
        for shard in pool_shards
    )
    return VnetPlan(pool.name, block, planned)


def _check_budgets(config: ClusterConfig, plan: AddressPlan) -> None:
    for i, pool in enumerate(config.node_pools):
        used = plan.vnet(pool.name).private_ips
        if used > plan.max_private_ips_per_vnet:
            fit = _fitting_pod_ips(pool, plan.max_private_ips_per_vnet)
            raise ConfigError(
                f"nodePools[{i}].maxNodes", pool.max_nodes,
                f"a pool whose VNet fits network.maxPrivateIpsPerVnet ({plan.max_private_ips_per_vnet}): "
                f"it needs {used} private IPs, {used - plan.max_private_ips_per_vnet} too many; "
                f"use podIpsPerNode <= {fit}, split the pool, or raise the limit")
    total = plan.private_ips
    if total > plan.max_private_ips_per_peered_group:
        over = total - plan.max_private_ips_per_peered_group
        hints = "; ".join(
            f"{pool.name}: {pool.max_nodes} nodes x {pod_ips(pool)} IPs" for pool in config.node_pools
        )
        raise ConfigError(
            "network.maxPrivateIpsPerPeeredGroup", plan.max_private_ips_per_peered_group,
            f"a limit the cluster fits: its peered VNets need {total} private IPs, {over} too many "
            f"({hints}); lower podIpsPerNode or maxNodes, or raise the limit")


def _fitting_pod_ips(pool: NodePoolConfig, limit: int) -> int:
    """The largest podIpsPerNode with which the pool's scale sets fit ``limit`` addresses."""
    count = len(shards(pool))
    per_node = (limit - count * AZURE_RESERVED_PER_SUBNET) // max(1, pool.max_nodes)
    return max(0, per_node - 1)
