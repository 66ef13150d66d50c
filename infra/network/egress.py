"""Egress to the internet: one Azure NAT gateway per cluster VNet, sized by SNAT ports.

Machines have no public IPs and subnets have no default outbound access, so a NAT
gateway is the only way out, with addresses that stay the same for as long as the
cluster exists (what third parties allowlist, and what registries rate-limit per IP:
the 2,500-node post's gcr.io quota). A NAT gateway serves the subnets of one VNet only,
hence one per VNet (learn.microsoft.com/azure/nat-gateway/nat-gateway-resource).

Sizing, from the same page: a NAT gateway takes at most 16 public IPs, and each IP
gives 64,512 SNAT ports, allocated to flows on demand rather than reserved per VM.
Node VNets get the maximum, a /28 prefix (16 IPs, 1,032,192 ports): a 3,000-node VNet
then averages 344 ports per node, and the prefix never has to be replaced as pools
grow (a new prefix would be new egress IPs). The system VNet (at most 45 VMs, mostly
package downloads) gets a /31 (2 IPs, 129,024 ports).
"""

from __future__ import annotations

from dataclasses import dataclass

from infra.config.cluster_config import ClusterConfig
from infra.network.addressing import AZURE_RESERVED_PER_SUBNET, ENDPOINTS_SUBNET, SYSTEM_VNET, AddressPlan, node_ips

SNAT_PORTS_PER_IP = 64_512
MAX_NAT_GATEWAY_IPS = 16
NODE_VNET_PREFIX_LENGTH = 32 - (MAX_NAT_GATEWAY_IPS.bit_length() - 1)  # a /28: all a NAT gateway takes
SYSTEM_VNET_PREFIX_LENGTH = 31  # 2 IPs
# Subnets with no VM in them (the Key Vault private endpoint) need no way out.
NO_EGRESS_SUBNETS = (ENDPOINTS_SUBNET,)


@dataclass(frozen=True)
class NatGatewayPlan:
    vnet: str
    subnets: tuple[str, ...]  # keys of the subnets it serves
    prefix_length: int  # of its public IP prefix

    @property
    def public_ips(self) -> int:
        return 1 << (32 - self.prefix_length)

    @property
    def snat_ports(self) -> int:
        return self.public_ips * SNAT_PORTS_PER_IP


def nat_gateways(plan: AddressPlan) -> tuple[NatGatewayPlan, ...]:
    gateways = []
    for vnet in plan.vnets:
        subnets = tuple(s.key for s in vnet.subnets if s.key not in NO_EGRESS_SUBNETS)
        length = SYSTEM_VNET_PREFIX_LENGTH if vnet.key == SYSTEM_VNET else NODE_VNET_PREFIX_LENGTH
        gateways.append(NatGatewayPlan(vnet.key, subnets, length))
    return tuple(gateways)


def machines_in_vnet(config: ClusterConfig, plan: AddressPlan, vnet_key: str) -> int:
    """VMs a VNet holds at full size: the control plane and NAT hosts, or a pool's nodes."""
    vnet = plan.vnet(vnet_key)
    if vnet.pool is None:
        return (
            config.etcd.members
            + config.events_etcd.members
            + config.control_plane.apiservers
            + config.network.nat_hosts.count
        )
    per_node = node_ips(config.pool(vnet.pool))
    return sum(subnet.private_ips - AZURE_RESERVED_PER_SUBNET for subnet in vnet.subnets) // per_node
