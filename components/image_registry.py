"""The cluster's Azure Container Registry: a private pull-through cache of the public registries nodes need.

Premium SKU (private endpoints need it), no public network access, no admin user, no
anonymous pull; one artifact-cache rule per upstream registry (``<prefix>/*`` <=
``<upstream>/*``, infra/catalog/image_refs.py); a private endpoint in the system VNet's ``endpoints``
subnet with the ``privatelink.azurecr.io`` zone linked to every cluster VNet; and the
node identity allowed to pull (AcrPull). Nodes preload from it at boot (infra/node/pinned_images.py).
"""

from __future__ import annotations

from collections.abc import Mapping

import pulumi

from components import declare
from components.grants import grant, role_definition
from components.private_link import private_link
from infra.config import naming

# Built-in role "AcrPull" (learn.microsoft.com/azure/role-based-access-control/built-in-roles/containers#acrpull).
ACR_PULL_ROLE = "7f951dda-4ed3-4680-a7ca-43fe172d538d"
# Private Link DNS zone for Azure Container Registry (learn.microsoft.com/azure/private-link/private-endpoint-dns).
ACR_PRIVATE_DNS_ZONE = "privatelink.azurecr.io"


class ImageRegistry(pulumi.ComponentResource):
    registry: declare.Declared
    login_server: str

    def __init__(
        self,
        name: str,
        *,
        cluster_name: str,
        resource_group_name: pulumi.Input[str],
        location: str,
        subscription_id: pulumi.Input[str],
        cache_rules: dict[str, str],
        endpoint_subnet_id: pulumi.Input[str],
        vnet_ids: Mapping[str, pulumi.Input[str]],
        pull_principal_ids: Mapping[str, pulumi.Input[str]],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("supercluster:registry:ImageRegistry", name, None, opts)
        registry_name = naming.container_registry(cluster_name)
        self.login_server = naming.container_registry_login_server(cluster_name)
        self.registry = declare.azure(
            "containerregistry:Registry",
            f"{name}-acr",
            {
                "registryName": registry_name,
                "resourceGroupName": resource_group_name,
                "location": location,
                "sku": {"name": "Premium"},
                "adminUserEnabled": False,
                "anonymousPullEnabled": False,
                "publicNetworkAccess": "Disabled",
                "networkRuleBypassOptions": "AzureServices",
                # Separate per-region data endpoints, so the private endpoint serves layer downloads too.
                "dataEndpointEnabled": True,
                # Nodes preload their images from it at boot: it must outlive a zone (Premium, no extra cost).
                "zoneRedundancy": "Enabled",
                # Nodes exchange tokens for the registry audience, never for ARM's.
                "policies": {"azureADAuthenticationAsArmPolicy": {"status": "disabled"}},
            },
            pulumi.ResourceOptions(parent=self, protect=True),
            outputs=["name"],
        )
        for prefix, upstream in sorted(cache_rules.items()):
            declare.azure(
                "containerregistry:CacheRule",
                f"{name}-cache-{prefix}",
                {
                    "cacheRuleName": naming.cache_rule(prefix),
                    "registryName": self.registry.output("name"),
                    "resourceGroupName": resource_group_name,
                    "sourceRepository": f"{upstream}/*",
                    "targetRepository": f"{prefix}/*",
                },
                pulumi.ResourceOptions(parent=self),
            )
        private_link(
            self,
            name,
            target_id=self.registry.id,
            group_id="registry",
            zone_name=ACR_PRIVATE_DNS_ZONE,
            endpoint_name=f"{registry_name}-pe",
            cluster_name=cluster_name,
            resource_group_name=resource_group_name,
            location=location,
            subnet_id=endpoint_subnet_id,
            vnet_ids=vnet_ids,
        )
        pull = role_definition(subscription_id, ACR_PULL_ROLE)
        for role, principal_id in sorted(pull_principal_ids.items()):
            grant(
                self,
                f"{name}-{role}-pull",
                key=f"{cluster_name}/acr-pull/{role}",
                scope=self.registry.id,
                principal_id=principal_id,
                role_definition_id=pull,
            )
        self.register_outputs({"registryId": self.registry.id, "loginServer": self.login_server})
