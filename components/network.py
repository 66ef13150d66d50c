"""The cluster's VNets and subnets exactly as ``infra.network.addressing`` planned them, with their NSGs,
NAT gateways and the full mesh of peerings between them.

Each VNet declares its subnets inline (its ``subnets`` list), so one VNet PUT creates or
extends all of them. Azure runs one subnet operation per VNet at a time: separate Subnet
resources, which Pulumi creates in parallel, fail with AnotherOperationInProgress
(pulumi-azure-native#699, #1024) - and a pool VNet holds up to a hundred shard subnets.
It also keeps the program to one resource per shard (its scale set): a Subnet resource
cost as much CPU to plan as the scale set itself. These VNets are this stack's alone; the
inline list is authoritative (a subnet missing from it is deleted), which is why the hub
(``components/hub.py``), where a network team may add gateway subnets, keeps separate
Subnet resources. A shard's subnet change shows in a preview as an update of its VNet's
``subnets[i]``; growing a pool appends to the list. Node-pool shards share one NSG and
each VNet one NAT gateway, so the resource count grows with VNets, never with nodes.
Subnets have no default outbound access: the NAT gateway is the only way out. VNets,
peerings and the egress prefixes are protected: deleting one would cut off every machine
behind it.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence

import pulumi

from components import declare
from infra.config import naming
from infra.network.addressing import ENDPOINTS_SUBNET, AddressPlan
from infra.network.egress import nat_gateways
from infra.network.security_groups import HUB, SecurityRule, security_groups, subnet_security_groups


class ClusterNetwork(pulumi.ComponentResource):
    vnet_ids: dict[str, pulumi.Output[str]]
    vnet_names: dict[str, pulumi.Output[str]]
    subnet_ids: dict[str, pulumi.Output[str]]
    egress_prefixes: dict[str, pulumi.Output[str]]

    def __init__(
        self,
        name: str,
        *,
        plan: AddressPlan,
        resource_group_name: pulumi.Input[str],
        location: str,
        hub_prefixes: pulumi.Input[Sequence[str]],
        monitoring_pools: Sequence[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("supercluster:network:ClusterNetwork", name, None, opts)
        self.vnet_ids, self.vnet_names, self.subnet_ids, self.egress_prefixes = {}, {}, {}, {}
        nsg_ids = {
            group.key: declare.azure(
                "network:NetworkSecurityGroup",
                f"{name}-{group.key}-nsg",
                {
                    "networkSecurityGroupName": naming.network_security_group(name, group.key),
                    "resourceGroupName": resource_group_name,
                    "location": location,
                    "securityRules": [_security_rule(rule, hub_prefixes) for rule in group.rules],
                },
                pulumi.ResourceOptions(parent=self),
            ).id
            for group in security_groups(plan, monitoring_pools=monitoring_pools)
        }
        nsg_of_subnet = subnet_security_groups(plan)
        egress_of_subnet: dict[str, pulumi.Output[str]] = {}
        for gateway in nat_gateways(plan):
            prefix = declare.azure(
                "network:PublicIPPrefix",
                f"{name}-{gateway.vnet}-egress",
                {
                    "publicIpPrefixName": naming.egress_prefix(name, gateway.vnet),
                    "resourceGroupName": resource_group_name,
                    "location": location,
                    "prefixLength": gateway.prefix_length,
                    "publicIPAddressVersion": "IPv4",
                    "sku": {"name": "Standard", "tier": "Regional"},
                },
                # Egress addresses are what others allowlist; a lost prefix cannot be had back.
                pulumi.ResourceOptions(parent=self, protect=True),
                outputs=["ipPrefix"],
            )
            nat = declare.azure(
                "network:NatGateway",
                f"{name}-{gateway.vnet}-natgw",
                {
                    "natGatewayName": naming.nat_gateway(name, gateway.vnet),
                    "resourceGroupName": resource_group_name,
                    "location": location,
                    "sku": {"name": "Standard"},
                    "publicIpPrefixes": [{"id": prefix.id}],
                },
                pulumi.ResourceOptions(parent=self),
            )
            self.egress_prefixes[gateway.vnet] = prefix.output("ipPrefix")
            egress_of_subnet.update({subnet: nat.id for subnet in gateway.subnets})

        vnets: dict[str, declare.Declared] = {}
        for vnet_plan in plan.vnets:
            vnet = declare.azure(
                "network:VirtualNetwork",
                f"{name}-{vnet_plan.key}",
                {
                    "virtualNetworkName": naming.vnet(name, vnet_plan.key),
                    "resourceGroupName": resource_group_name,
                    "location": location,
                    "addressSpace": {"addressPrefixes": [str(vnet_plan.address_space)]},
                    # No DDoS plan (nothing in these VNets is public); Azure's defaults, stated.
                    "enableDdosProtection": False,
                    "enableVmProtection": False,
                    "subnets": [
                        {
                            "name": subnet_plan.key,
                            "addressPrefix": str(subnet_plan.cidr),
                            "networkSecurityGroup": {"id": nsg_ids[nsg_of_subnet[subnet_plan.key]]},
                            "natGateway": (
                                {"id": egress_of_subnet[subnet_plan.key]}
                                if subnet_plan.key in egress_of_subnet
                                else None
                            ),
                            "defaultOutboundAccess": False,
                            # Let the NSG apply to the private endpoint's traffic too (off by default for endpoints).
                            "privateEndpointNetworkPolicies": "Enabled"
                            if subnet_plan.key == ENDPOINTS_SUBNET
                            else "Disabled",
                            "privateLinkServiceNetworkPolicies": "Enabled",  # Azure's default, stated
                        }
                        for subnet_plan in vnet_plan.subnets
                    ],
                },
                pulumi.ResourceOptions(parent=self, protect=True),
                outputs=["name"],
            )
            vnets[vnet_plan.key] = vnet
            self.vnet_ids[vnet_plan.key] = vnet.id
            self.vnet_names[vnet_plan.key] = vnet.output("name")
            for subnet_plan in vnet_plan.subnets:
                # Azure's id of a subnet: its VNet's id, /subnets/, its name. Taken from vnet.id, so whatever
                # uses a subnet waits for the VNet that creates it. One apply, not Output.concat: concat lifts
                # each of its three parts into an Output and gathers them, five times the SDK's work, once per
                # shard (about 0.035 s of CPU for the 252 subnets of a 30,000-node plan).
                self.subnet_ids[subnet_plan.key] = vnet.id.apply(functools.partial(_subnet_id, subnet=subnet_plan.key))
        # Full mesh: every pod reaches every pod directly, across VNets, with no gateway in between.
        for (a_key, a), (b_key, b) in itertools.permutations(vnets.items(), 2):
            declare.azure(
                "network:VirtualNetworkPeering",
                f"{name}-peer-{a_key}-to-{b_key}",
                {
                    "virtualNetworkPeeringName": f"to-{b_key}",
                    "virtualNetworkName": a.output("name"),
                    "resourceGroupName": resource_group_name,
                    "remoteVirtualNetwork": {"id": b.id},
                    "allowVirtualNetworkAccess": True,
                    "allowForwardedTraffic": True,
                },
                pulumi.ResourceOptions(parent=a, protect=True),
            )
        self.register_outputs(
            {"vnetIds": self.vnet_ids, "subnetIds": self.subnet_ids, "egressPrefixes": self.egress_prefixes}
        )


def _subnet_id(vnet_id: str, subnet: str) -> str:
    return f"{vnet_id}/subnets/{subnet}"


def _security_rule(rule: SecurityRule, hub_prefixes: pulumi.Input[Sequence[str]]) -> dict:
    """One NSG rule; a single source or port goes in the singular field (service tags only fit there)."""
    sources: dict = {}
    if HUB in rule.sources:
        others = [s for s in rule.sources if s != HUB]
        sources["sourceAddressPrefixes"] = pulumi.Output.from_input(hub_prefixes).apply(lambda hub: [*hub, *others])
    elif len(rule.sources) == 1:
        sources["sourceAddressPrefix"] = rule.sources[0]
    else:
        sources["sourceAddressPrefixes"] = list(rule.sources)
    destinations = (
        {"destinationAddressPrefix": rule.destinations[0]}
        if len(rule.destinations) == 1
        else {"destinationAddressPrefixes": list(rule.destinations)}
    )
    ports = (
        {"destinationPortRange": rule.ports[0]} if len(rule.ports) == 1 else {"destinationPortRanges": list(rule.ports)}
    )
    return {
        "name": rule.name,
        "priority": rule.priority,
        "direction": rule.direction,
        "access": rule.access,
        "protocol": rule.protocol,
        "description": rule.description,
        "sourcePortRange": "*",
        **sources,
        **destinations,
        **ports,
    }
