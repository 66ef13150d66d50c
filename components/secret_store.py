"""The cluster's Key Vault: where every private key and token lives, reachable only privately.

RBAC mode (no access policies), purge protection and soft delete on, public network
access off, a private endpoint in the system VNet's ``endpoints`` subnet and a
private DNS zone linked to every cluster VNet. ``add_secret`` stores one secret and
lets exactly one role identity read exactly that secret.
"""

from __future__ import annotations

from collections.abc import Mapping

import pulumi

from components import declare
from components.grants import grant, role_definition
from components.private_link import private_link
from infra.config import naming

# Built-in role "Key Vault Secrets User": read secret contents
# (learn.microsoft.com/azure/role-based-access-control/built-in-roles/security#key-vault-secrets-user).
KEY_VAULT_SECRETS_USER_ROLE = "4633458b-17de-408a-b874-0445c86b69e6"
# Built-in role "Key Vault Secrets Officer": every action on secrets' contents (set a new version included), none
# on permissions (built-in-roles/security#key-vault-secrets-officer). Granted on one secret only: the one the
# apiservers' token minter rewrites (infra/control_plane/token_minting.py). Azure has no built-in role that only
# sets a secret.
KEY_VAULT_SECRETS_OFFICER_ROLE = "b86a8fe4-44ce-4948-aee5-eccb2c155cd7"
# Private Link DNS zone for Key Vault (learn.microsoft.com/azure/private-link/private-endpoint-dns).
KEY_VAULT_PRIVATE_DNS_ZONE = "privatelink.vaultcore.azure.net"
# Soft-delete retention: Azure allows 7-90 days; the maximum gives the most time to recover.
SOFT_DELETE_RETENTION_DAYS = 90


class SecretStore(pulumi.ComponentResource):
    vault: declare.Declared
    vault_name: str

    def __init__(
        self,
        name: str,
        *,
        cluster_name: str,
        resource_group_name: pulumi.Input[str],
        location: str,
        tenant_id: pulumi.Input[str],
        subscription_id: pulumi.Input[str],
        endpoint_subnet_id: pulumi.Input[str],
        vnet_ids: Mapping[str, pulumi.Input[str]],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("supercluster:secrets:SecretStore", name, None, opts)
        self._cluster_name = cluster_name
        self._resource_group_name = resource_group_name
        self._subscription_id = subscription_id
        self.vault_name = naming.key_vault(cluster_name)
        self.vault = declare.azure(
            "keyvault:Vault",
            f"{name}-vault",
            {
                "vaultName": self.vault_name,
                "resourceGroupName": resource_group_name,
                "location": location,
                "properties": {
                    "tenantId": tenant_id,
                    "sku": {"family": "A", "name": "standard"},
                    "enableRbacAuthorization": True,
                    "enableSoftDelete": True,
                    "softDeleteRetentionInDays": SOFT_DELETE_RETENTION_DAYS,
                    "enablePurgeProtection": True,
                    "publicNetworkAccess": "Disabled",
                    "networkAcls": {"defaultAction": "Deny", "bypass": "AzureServices"},
                    # Machines read secrets with their own identity (RBAC), never through ARM or disk encryption.
                    "enabledForDeployment": False,
                    "enabledForDiskEncryption": False,
                    "enabledForTemplateDeployment": False,
                },
            },
            pulumi.ResourceOptions(parent=self, protect=True),
            outputs=["name"],
        )
        private_link(
            self,
            name,
            target_id=self.vault.id,
            group_id="vault",
            zone_name=KEY_VAULT_PRIVATE_DNS_ZONE,
            endpoint_name=f"{self.vault_name}-pe",
            cluster_name=cluster_name,
            resource_group_name=resource_group_name,
            location=location,
            subnet_id=endpoint_subnet_id,
            vnet_ids=vnet_ids,
        )
        self.register_outputs({"vaultName": self.vault_name, "vaultId": self.vault.id})

    def add_secret(
        self,
        owner: pulumi.Resource,
        logical_name: str,
        secret_name: str,
        value: pulumi.Input[str],
        readers: Mapping[str, pulumi.Input[str]],
        writers: Mapping[str, pulumi.Input[str]] | None = None,
    ) -> declare.Declared:
        """Stores ``value`` (always as a Pulumi secret) and lets exactly the ``readers`` (role name ->
        identity principal id) read it; every resource is a child of ``owner``. With ``writers``, those identities
        may also write new versions, and ``value`` is only the first: the program never sets it again
        (``ignore_changes``), so a ``pulumi up`` does not roll back what a writer put there."""
        secret = declare.azure(
            "keyvault:Secret",
            logical_name,
            {
                "secretName": secret_name,
                "vaultName": self.vault.output("name"),
                "resourceGroupName": self._resource_group_name,
                "properties": {"value": pulumi.Output.secret(value)},
            },
            pulumi.ResourceOptions(parent=owner, ignore_changes=["properties.value"] if writers else None),
            outputs=["properties"],
        )
        # Readers keep their grants' original keys; writers' end in /writer.
        for holders, role_name, kind, suffix in (
            (readers, KEY_VAULT_SECRETS_USER_ROLE, "reader", ""),
            (writers, KEY_VAULT_SECRETS_OFFICER_ROLE, "writer", "/writer"),
        ):
            if not holders:
                continue
            definition = role_definition(self._subscription_id, role_name)
            for role, principal_id in sorted(holders.items()):
                grant(
                    owner,
                    f"{logical_name}-{role}-{kind}",
                    key=f"{self._cluster_name}/{secret_name}/{role}{suffix}",
                    scope=secret.id,
                    principal_id=principal_id,
                    role_definition_id=definition,
                )
        return secret
