"""The address plan: which VNet and subnet every machine and pod address comes from.

Pods get real VNet addresses (alias IPs: ``1 + podIpsPerNode`` IP configurations on
every node NIC, handed to pods by the Azure CNI plugin), so every pod address counts
against Azure's private-IP limits: 65,536 per VNet and 128,000 across a peered group.

Layout (never reordered, only appended to, so a re-plan moves nothing):
- ``network.addressSpace`` is cut into 64 equal blocks. Block 0 holds the *system* VNet
  (etcd, events etcd, apiservers, NAT hosts, private endpoints), in the fixed order of
  ``SYSTEM_SUBNETS``. Block ``addressSlot`` belongs to one node pool.
- Inside a pool's block, shard ``i`` of the pool owns the ``i``-th subnet sized for a
  full shard (``capacity x (1 + podIpsPerNode)`` plus Azure's 5 reserved addresses), so
  growing the pool only appends subnets.
- A VNet never spans more than a /16 (``MAX_VNET_ADDRESSES``, Azure's per-VNet private-IP
  limit): a pool whose block is larger gets one VNet per /16 of the block that holds its
  shards (``h100a``, ``h100a-1``, ...). So a VNet can never outgrow Azure's limit, a big
  pool spreads over several VNets, and which VNet a shard lives in depends only on its
  position, never on the configured limits.
- All cluster VNets are peered in a full mesh (pods reach pods directly) and to the hub;
  a hub created here (``network.hub.addressSpace``) is part of the peered group.
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass

from infra.config.cluster_config import ADDRESS_BLOCKS, ClusterConfig, NodePoolConfig
from infra.config.errors import ConfigError
from infra.config.sizing import shards
from infra.facts import roles

# The cluster's DNS domain: Kubernetes' conventional default, which kubelet, CoreDNS and the
# apiserver's certificate SANs must all agree on.
CLUSTER_DOMAIN = "cluster.local"
# Azure reserves 5 addresses in every subnet: network, gateway, 2 for Azure DNS, broadcast
# (learn.microsoft.com/azure/virtual-network/virtual-networks-faq, "reserved IP addresses").
AZURE_RESERVED_PER_SUBNET = 5
# First usable host offset in a subnet (.0-.3 are reserved by Azure).
FIRST_HOST_OFFSET = 4
# Azure's smallest subnet is a /29; we never cut below a /28 (16 addresses, 11 usable).
MIN_SUBNET_PREFIX = 28
# System subnets, in their fixed order inside block 0; each is a /27 (32 addresses),
# enough for 7 etcd members or 15 apiservers or 16 NAT hosts plus a load balancer frontend.
SYSTEM_SUBNETS = roles.SYSTEM_SUBNETS
SYSTEM_SUBNET_PREFIX = 27
SYSTEM_VNET = roles.SYSTEM_VNET
ENDPOINTS_SUBNET = roles.ENDPOINTS_SUBNET  # private endpoints only (Key Vault); no VM lives there
# Azure: 65,536 private IP addresses per VNet (azure-subscription-service-limits#networking-limits).
# A /16 holds exactly that many addresses, so a VNet no larger than a /16 cannot exceed it.
MAX_VNET_ADDRESSES = 65_536
# The hub created here: researchers' subnet in the first half, the second half left for a
# VPN/ExpressRoute gateway or Bastion (GatewaySubnet and AzureBastionSubnet need a /27 and /26).
HUB_VNET = "hub"
HUB_SUBNETS = ("researchers",)
MIN_HUB_PREFIX = 26
# VNet keys that are not pools; a pool may not take these names.
RESERVED_VNET_KEYS = (SYSTEM_VNET, HUB_VNET)


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
    key: str  # "system", "hub", a pool name, or "<pool>-<n>" for the n-th /16 of a big pool
    address_space: ipaddress.IPv4Network
    subnets: tuple[SubnetPlan, ...]
    pool: str | None = None  # the node pool whose shards it holds, None for system and hub
    private_ip_cap: int | None = None  # counts at most this many (a hub we only know the size of)

    @property
    def private_ips(self) -> int:
        counted = sum(subnet.private_ips for subnet in self.subnets)
        return counted if self.private_ip_cap is None else self.private_ip_cap


@dataclass(frozen=True)
class AddressPlan:
    vnets: tuple[VnetPlan, ...]  # the cluster's own VNets: system first, then pools in config order
    service_cidr: ipaddress.IPv4Network
    max_private_ips_per_vnet: int
    max_private_ips_per_peered_group: int
    address_space: ipaddress.IPv4Network | None = None  # network.addressSpace: every cluster VNet is inside
    hub: VnetPlan | None = None  # the hub VNet when this stack creates it (network.hub.addressSpace)

    @property
    def peered_vnets(self) -> tuple[VnetPlan, ...]:
        """Every VNet of the peered group this plan knows: the cluster's, plus a hub created here."""
        return self.vnets + ((self.hub,) if self.hub is not None else ())

    @property
    def private_ips(self) -> int:
        """Private IPs of the peered group at full size (what Azure's 128,000 limit is checked against)."""
        return sum(vnet.private_ips for vnet in self.peered_vnets)

    @property
    def cluster_ranges(self) -> tuple[ipaddress.IPv4Network, ...]:
        """Every node and pod address of the cluster lies in these (the whole ``network.addressSpace``)."""
        if self.address_space is not None:
            return (self.address_space,)
        return tuple(vnet.address_space for vnet in self.vnets)

    def vnet(self, key: str) -> VnetPlan:
        return next(v for v in self.peered_vnets if v.key == key)

    def pool_vnets(self, pool: str) -> tuple[VnetPlan, ...]:
        return tuple(v for v in self.vnets if v.pool == pool)

    def subnet(self, key: str) -> SubnetPlan:
        return next(s for v in self.peered_vnets for s in v.subnets if s.key == key)

    # Static addresses. Offset 0 of a system subnet is its load balancer frontend where it has one.
    def etcd_ips(self, subnet_key: str, members: int) -> tuple[str, ...]:
        return tuple(self.subnet(subnet_key).host(i) for i in range(members))

    def apiserver_lb_ip(self) -> str:
        return self.subnet(roles.APISERVER.subnet).host(0)

    def apiserver_ips(self, count: int) -> tuple[str, ...]:
        return tuple(self.subnet(roles.APISERVER.subnet).host(1 + i) for i in range(count))

    def nat_lb_ip(self) -> str:
        return self.subnet(roles.NAT_HOST.subnet).host(0)

    def nat_host_ips(self, count: int) -> tuple[str, ...]:
        return tuple(self.subnet(roles.NAT_HOST.subnet).host(1 + i) for i in range(count))

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
    for index, pool in enumerate(config.node_pools):
        if pool.name in RESERVED_VNET_KEYS:
            raise ConfigError(
                f"nodePools[{index}].name",
                pool.name,
                f"a name other than {' or '.join(RESERVED_VNET_KEYS)} (those VNet names are taken)",
            )
        vnets += _pool_vnets(pool, index, blocks[pool.address_slot])
    hub = _hub_vnet(network.hub.address_space) if network.hub.address_space is not None else None
    plan = AddressPlan(
        tuple(vnets),
        network.service_cidr,
        network.max_private_ips_per_vnet,
        network.max_private_ips_per_peered_group,
        network.address_space,
        hub,
    )
    _check_budgets(config, plan)
    return plan


def pod_ip_configurations(pool: NodePoolConfig) -> int:
    """Secondary IP configurations on each node's NIC, one per pod (Azure CNI gives every non-primary
    one to a pod). The scale set's NIC model and the kubelet's ``maxPods`` both read this one value:
    a pod scheduled past it would find no address and never start."""
    return pool.pod_ips_per_node


def node_ips(pool: NodePoolConfig) -> int:
    """Private IPs one node of the pool holds: its own plus its pod IP configurations."""
    return 1 + pod_ip_configurations(pool)


def _nth(block: ipaddress.IPv4Network, prefix: int, index: int) -> ipaddress.IPv4Network:
    """The ``index``-th /``prefix`` of ``block`` (computed, so a /14 cut into /28s is not enumerated)."""
    size = 2 ** (32 - prefix)
    return ipaddress.IPv4Network((int(block.network_address) + index * size, prefix))


def _vnet_prefix(block: ipaddress.IPv4Network) -> int:
    """The prefix of a VNet carved from ``block``: the whole block, but never more than a /16."""
    return max(block.prefixlen, 32 - int(math.log2(MAX_VNET_ADDRESSES)))


def _system_vnet(block: ipaddress.IPv4Network) -> VnetPlan:
    space = _nth(block, _vnet_prefix(block), 0)
    subnets = tuple(
        SubnetPlan(key, SYSTEM_VNET, cidr, cidr.num_addresses)
        for key, cidr in zip(SYSTEM_SUBNETS, space.subnets(new_prefix=SYSTEM_SUBNET_PREFIX), strict=False)
    )
    return VnetPlan(SYSTEM_VNET, space, subnets)


def _hub_vnet(space: ipaddress.IPv4Network) -> VnetPlan:
    if space.prefixlen > MIN_HUB_PREFIX:
        raise ConfigError(
            "network.hub.addressSpace",
            str(space),
            f"a range of /{MIN_HUB_PREFIX} or larger (researchers' subnet in the first half, "
            "a gateway or Bastion subnet in the second)",
        )
    researchers = _nth(space, space.prefixlen + 1, 0)
    subnets = (SubnetPlan(HUB_SUBNETS[0], HUB_VNET, researchers, researchers.num_addresses),)
    # We do not know what the hub's owners put in the rest of it: count all of it, but never more
    # than a VNet can hold (Azure refuses the rest).
    return VnetPlan(HUB_VNET, space, subnets, private_ip_cap=min(space.num_addresses, MAX_VNET_ADDRESSES))


def _pool_vnets(pool: NodePoolConfig, index: int, block: ipaddress.IPv4Network) -> list[VnetPlan]:
    pool_shards = shards(pool)
    capacity = pool_shards[0].capacity
    per_shard = capacity * node_ips(pool) + AZURE_RESERVED_PER_SUBNET
    prefix = min(MIN_SUBNET_PREFIX, 32 - math.ceil(math.log2(per_shard)))
    vnet_prefix = _vnet_prefix(block)
    key = f"nodePools[{index}]"
    if per_shard > MAX_VNET_ADDRESSES:
        fit = (MAX_VNET_ADDRESSES - AZURE_RESERVED_PER_SUBNET) // capacity - 1
        raise ConfigError(
            f"{key}.podIpsPerNode",
            pool.pod_ips_per_node,
            f"at most {fit} pod IPs per node: one {pool.name} scale set of {capacity} VMs needs "
            f"{per_shard:,} addresses, more than the {MAX_VNET_ADDRESSES:,} one VNet can hold",
        )
    if prefix < block.prefixlen:
        raise ConfigError(
            f"{key}.podIpsPerNode",
            pool.pod_ips_per_node,
            f"fewer pod IPs per node: one {pool.name} scale set needs {per_shard:,} addresses "
            f"but its address block {block} has {block.num_addresses:,}; "
            f"or a larger network.addressSpace",
        )
    room = 2 ** (prefix - block.prefixlen)
    if len(pool_shards) > room:
        raise ConfigError(
            f"{key}.maxNodes",
            pool.max_nodes,
            f"at most {room * capacity} nodes: {len(pool_shards)} scale sets of "
            f"/{prefix} do not fit the pool's address block {block}; split the pool or use a "
            f"larger network.addressSpace",
        )
    shards_per_vnet = 2 ** (prefix - vnet_prefix)
    by_vnet: dict[int, list[SubnetPlan]] = {}
    for shard in pool_shards:
        chunk = shard.index // shards_per_vnet
        # Sized for a full shard (so it never has to move), counted at the shard's maxNodes
        # (the autoscaler never goes past it).
        by_vnet.setdefault(chunk, []).append(
            SubnetPlan(
                shard.name,
                _pool_vnet_key(pool.name, chunk),
                _nth(block, prefix, shard.index),
                shard.max_nodes * node_ips(pool) + AZURE_RESERVED_PER_SUBNET,
            )
        )
    return [
        VnetPlan(_pool_vnet_key(pool.name, chunk), _nth(block, vnet_prefix, chunk), tuple(subnets), pool.name)
        for chunk, subnets in sorted(by_vnet.items())
    ]


def _pool_vnet_key(pool: str, chunk: int) -> str:
    """``h100a`` for the pool's first VNet, ``h100a-1`` for its second /16 (pool names never hold '-')."""
    return pool if chunk == 0 else f"{pool}-{chunk}"


# --------------------------------------------------------------------------- budgets


def _check_budgets(config: ClusterConfig, plan: AddressPlan) -> None:
    pools = {pool.name: (i, pool) for i, pool in enumerate(config.node_pools)}
    for vnet in plan.vnets:
        used = vnet.private_ips
        if used <= plan.max_private_ips_per_vnet or vnet.pool is None:
            continue
        i, pool = pools[vnet.pool]
        nodes = sum(s.private_ips - AZURE_RESERVED_PER_SUBNET for s in vnet.subnets) // node_ips(pool)
        fit = (plan.max_private_ips_per_vnet - len(vnet.subnets) * AZURE_RESERVED_PER_SUBNET) // max(1, nodes) - 1
        raise ConfigError(
            f"nodePools[{i}].maxNodes",
            pool.max_nodes,
            f"a pool whose VNets each fit network.maxPrivateIpsPerVnet ({plan.max_private_ips_per_vnet:,}): "
            f"VNet {vnet.key} needs {used:,} private IPs, {used - plan.max_private_ips_per_vnet:,} too many; "
            f"use podIpsPerNode <= {max(0, fit)}, split the pool, or raise the limit",
        )
    total = plan.private_ips
    limit = plan.max_private_ips_per_peered_group
    if total > limit:
        fits = [hint for pool in config.node_pools if (hint := _peered_group_hint(pool, plan, limit))]
        any_one = f"any one of these fits: {'; '.join(fits)}; " if fits else ""
        hub = f" (including the hub's {plan.hub.private_ips:,})" if plan.hub is not None else ""
        raise ConfigError(
            "network.maxPrivateIpsPerPeeredGroup",
            limit,
            f"a limit the cluster fits: its peered VNets need {total:,} private IPs{hub}, {total - limit:,} too many; "
            f"{any_one}or raise the limit to {total:,}",
        )


def pool_private_ips(pool: NodePoolConfig, max_nodes: int | None = None) -> int:
    """Private IPs the pool's subnets count at full size (as planned, or with another ``maxNodes``)."""
    nodes = pool.max_nodes if max_nodes is None else max_nodes
    shard_count = max(1, math.ceil(nodes / shards(pool)[0].capacity))
    return (0 if pool.retired else nodes) * node_ips(pool) + shard_count * AZURE_RESERVED_PER_SUBNET


def _peered_group_hint(pool: NodePoolConfig, plan: AddressPlan, limit: int) -> str | None:
    """How this pool alone could change for the peered group to fit, or None if it cannot."""
    if pool.retired:
        return None
    budget = limit - (plan.private_ips - pool_private_ips(pool))
    options = []
    shard_count = len(shards(pool))
    pod_fit = (budget - shard_count * AZURE_RESERVED_PER_SUBNET) // pool.max_nodes - 1
    if pod_fit >= 1:
        options.append(f"podIpsPerNode <= {pod_fit}")
    nodes = max(0, (budget - AZURE_RESERVED_PER_SUBNET) // node_ips(pool))
    while nodes > 0 and pool_private_ips(pool, max_nodes=nodes) > budget:
        nodes -= 1
    if nodes >= max(1, pool.min_nodes):
        options.append(f"maxNodes <= {nodes:,}")
    return f"{pool.name} {' or '.join(options)}" if options else None
