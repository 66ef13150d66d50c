"""A private endpoint with its private DNS zone: how the cluster reaches Key Vault, the registry and
Blob storage without any of them being reachable from the internet.

The zone (one per service type per resource group, e.g. ``privatelink.vaultcore.azure.net``) is
linked to the given VNets, and the endpoint registers its address in it, so the service's usual
name resolves to the private address inside the cluster (learn.microsoft.com/azure/private-link/
private-endpoint-dns).
"""

from __future__ import annotations

import pulumi
import pulumi_azure_native as azure


def private_link(owner: pulumi.Resource, name: str, *, target_id: pulumi.Input[str], group_id: str,
                 zone_name: str, endpoint_name: str, cluster_name: str, resource_group_name: pulumi.Input[str],
                 location: str, subnet_id: pulumi.Input[str],
                 vnet_ids: dict[str, pulumi.Input[str]]) -> azure.network.PrivateEndpoint:
    """Declares zone, VNet links, endpoint and DNS zone group as children of ``owner``, named ``name-*``."""
    child = pulumi.ResourceOptions(parent=owner)
    zone = azure.privatedns.PrivateZone(
        f"{name}-dns",
        private_zone_name=zone_name,
        resource_group_name=resource_group_name,
        location="global",
        opts=child,
    )
    for vnet_key, vnet_id in sorted(vnet_ids.items()):
        azure.privatedns.VirtualNetworkLink(
            f"{name}-dns-{vnet_key}",
            virtual_network_link_name=f"{cluster_name}-{vnet_key}",
            private_zone_name=zone.name,
            resource_group_name=resource_group_name,
            location="global",
            registration_enabled=False,
            virtual_network=azure.privatedns.SubResourceArgs(id=vnet_id),
            opts=child,
        )
    endpoint = azure.network.PrivateEndpoint(
        f"{name}-endpoint",
        private_endpoint_name=endpoint_name,
        resource_group_name=resource_group_name,
        location=location,
        subnet=azure.network.SubnetArgs(id=subnet_id),
        private_link_service_connections=[azure.network.PrivateLinkServiceConnectionArgs(
            name=group_id, private_link_service_id=target_id, group_ids=[group_id])],
        opts=child,
    )
    azure.network.PrivateDnsZoneGroup(
        f"{name}-endpoint-dns",
        private_dns_zone_group_name=group_id,
        private_endpoint_name=endpoint.name,
        resource_group_name=resource_group_name,
        private_dns_zone_configs=[azure.network.PrivateDnsZoneConfigArgs(name=group_id, private_dns_zone_id=zone.id)],
        opts=child,
    )
    return endpoint
