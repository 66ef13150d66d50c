"""A private endpoint with its private DNS zone: how the cluster reaches Key Vault, the registry and
Blob storage without any of them being reachable from the internet.

The zone (one per service type per resource group, e.g. ``privatelink.vaultcore.azure.net``) is
linked to the given VNets, and the endpoint registers its address in it, so the service's usual
name resolves to the private address inside the cluster (learn.microsoft.com/azure/private-link/
private-endpoint-dns).
"""

from __future__ import annotations

from collections.abc import Mapping

import pulumi

from components import declare


def private_link(
    owner: pulumi.Resource,
    name: str,
    *,
    target_id: pulumi.Input[str],
    group_id: str,
    zone_name: str,
    endpoint_name: str,
    cluster_name: str,
    resource_group_name: pulumi.Input[str],
    location: str,
    subnet_id: pulumi.Input[str],
    vnet_ids: Mapping[str, pulumi.Input[str]],
) -> declare.Declared:
    """Declares zone, VNet links, endpoint and DNS zone group as children of ``owner``, named ``name-*``."""
    child = pulumi.ResourceOptions(parent=owner)
    zone = declare.azure(
        "privatedns:PrivateZone",
        f"{name}-dns",
        {
            "privateZoneName": zone_name,
            "resourceGroupName": resource_group_name,
            "location": "global",
        },
        child,
        outputs=["name"],
    )
    for vnet_key, vnet_id in sorted(vnet_ids.items()):
        declare.azure(
            "privatedns:VirtualNetworkLink",
            f"{name}-dns-{vnet_key}",
            {
                "virtualNetworkLinkName": f"{cluster_name}-{vnet_key}",
                "privateZoneName": zone.output("name"),
                "resourceGroupName": resource_group_name,
                "location": "global",
                "registrationEnabled": False,
                "virtualNetwork": {"id": vnet_id},
            },
            child,
        )
    endpoint = declare.azure(
        "network:PrivateEndpoint",
        f"{name}-endpoint",
        {
            "privateEndpointName": endpoint_name,
            "resourceGroupName": resource_group_name,
            "location": location,
            "subnet": {"id": subnet_id},
            "privateLinkServiceConnections": [
                {"name": group_id, "privateLinkServiceId": target_id, "groupIds": [group_id]}
            ],
        },
        child,
        outputs=["name"],
    )
    declare.azure(
        "network:PrivateDnsZoneGroup",
        f"{name}-endpoint-dns",
        {
            "privateDnsZoneGroupName": group_id,
            "privateEndpointName": endpoint.output("name"),
            "resourceGroupName": resource_group_name,
            "privateDnsZoneConfigs": [{"name": group_id, "privateDnsZoneId": zone.id}],
        },
        child,
    )
    return endpoint
