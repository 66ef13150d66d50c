"""The cluster's VNets and subnets, exactly as ``infra.addressing`` planned them, peered in a full mesh.

One VNet per address block (``system`` and one per node pool); every subnet is its
own resource so a preview shows subnet-level changes, and growing a pool only adds
subnets. VNets are protected: deleting one would take every machine in it along.
"""

from __future__ import annotations

import itertools

import pulumi
import pulumi_azure_native as azure

from infra import naming
from infra.addressing import AddressPlan


class ClusterNetwork(pulumi.ComponentResource):
    vnet_ids: dict[str, pulumi.Output[str]]
    subnet_ids: dict[str, pulumi.Output[str]]

    def __init__(self, name: str, *, plan: AddressPlan, resource_group_name: pulumi.Input[str],
                 location: str, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("supercluster:network:ClusterNetwork", name, None, opts)
        self.vnet_ids = {}
        self.subnet_ids = {}
        vnets: dict[str, azure.network.VirtualNetwork] = {}
        for vnet_plan in plan.vnets:
            vnet = azure.network.VirtualNetwork(
                f"{name}-{vnet_plan.key}",
                virtual_network_name=naming.vnet(name, vnet_plan.key),
                resource_group_name=resource_group_name,
                location=location,
                address_space=azure.network.AddressSpaceArgs(address_prefixes=[str(vnet_plan.address_space)]),
                # Subnets are separate resources below; the VNet must not try to own them.
                opts=pulumi.ResourceOptions(parent=self, protect=True, ignore_changes=["subnets"]),
            )
            vnets[vnet_plan.key] = vnet
            self.vnet_ids[vnet_plan.key] = vnet.id
            for subnet_plan in vnet_plan.subnets:
                subnet = azure.network.Subnet(
                    f"{name}-{subnet_plan.key}",
                    subnet_name=subnet_plan.key,
                    virtual_network_name=vnet.name,
                    resource_group_name=resource_group_name,
                    address_prefix=str(subnet_plan.cidr),
                    opts=pulumi.ResourceOptions(parent=vnet),
                )
                self.subnet_ids[subnet_plan.key] = subnet.id
        # Full mesh: every pod reaches every pod directly, across VNets, with no gateway in between.
        for (a_key, a), (b_key, b) in itertools.permutations(vnets.items(), 2):
            azure.network.VirtualNetworkPeering(
                f"{name}-peer-{a_key}-to-{b_key}",
                virtual_network_peering_name=f"to-{b_key}",
                virtual_network_name=a.name,
                resource_group_name=resource_group_name,
                remote_virtual_network=azure.network.SubResourceArgs(id=b.id),
                allow_virtual_network_access=True,
                allow_forwarded_traffic=True,
                opts=pulumi.ResourceOptions(parent=a, protect=True),
            )
        self.register_outputs({"vnetIds": self.vnet_ids, "subnetIds": self.subnet_ids})
