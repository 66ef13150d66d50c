"""The storage account that keeps etcd snapshots, reachable only privately and only with Entra tokens.

Private (public network access off, a private endpoint in the ``endpoints`` subnet, a private
DNS zone linked to the system VNet), no shared keys (members authenticate with their managed
identity), blob versioning and soft delete on (a compromised member cannot destroy history),
zone-redundant, and a lifecycle rule that ages snapshots out. The account is protected.
``add_container`` gives one etcd cluster its container, retained if ever removed from the
program, writable by that cluster's identity only.
"""

from __future__ import annotations

import pulumi

from components import declare
from components.grants import grant, role_definition
from components.private_link import private_link
from infra.etcd import backup
from infra.etcd.spec import ROLES

# Built-in role "Storage Blob Data Contributor": read, write and delete blobs
# (learn.microsoft.com/azure/role-based-access-control/built-in-roles/storage#storage-blob-data-contributor).
STORAGE_BLOB_DATA_CONTRIBUTOR_ROLE = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
# Private Link DNS zone for Blob storage (learn.microsoft.com/azure/private-link/private-endpoint-dns).
BLOB_PRIVATE_DNS_ZONE = "privatelink.blob.core.windows.net"


class EtcdBackupStore(pulumi.ComponentResource):
    account: declare.Declared
    account_name: str

    def __init__(
        self,
        name: str,
        *,
        cluster_name: str,
        resource_group_name: pulumi.Input[str],
        location: str,
        subscription_id: pulumi.Input[str],
        endpoint_subnet_id: pulumi.Input[str],
        vnet_id: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("supercluster:etcd:EtcdBackupStore", name, None, opts)
        self._cluster_name = cluster_name
        self._resource_group_name = resource_group_name
        self._subscription_id = subscription_id
        self.account_name = backup.storage_account_name(cluster_name)
        self.account = declare.azure(
            "storage:StorageAccount",
            f"{name}-account",
            {
                "accountName": self.account_name,
                "resourceGroupName": resource_group_name,
                "location": location,
                "kind": "StorageV2",
                # Zone-redundant, like the members whose state it keeps.
                "sku": {"name": "Standard_ZRS"},
                "accessTier": "Hot",
                "allowSharedKeyAccess": False,
                "defaultToOAuthAuthentication": True,
                "allowBlobPublicAccess": False,
                "allowCrossTenantReplication": False,
                "publicNetworkAccess": "Disabled",
                "networkRuleSet": {"defaultAction": "Deny", "bypass": "None"},
                "enableHttpsTrafficOnly": True,
                "minimumTlsVersion": "TLS1_2",
            },
            pulumi.ResourceOptions(parent=self, protect=True),
            outputs=["name"],
        )
        soft_delete = {"enabled": True, "days": backup.SOFT_DELETE_DAYS}
        declare.azure(
            "storage:BlobServiceProperties",
            f"{name}-blob-service",
            {
                "accountName": self.account.output("name"),
                "resourceGroupName": resource_group_name,
                "blobServicesName": "default",
                "isVersioningEnabled": True,
                "deleteRetentionPolicy": soft_delete,
                "containerDeleteRetentionPolicy": soft_delete,
            },
            pulumi.ResourceOptions(parent=self),
        )
        declare.azure(
            "storage:ManagementPolicy",
            f"{name}-lifecycle",
            {
                "accountName": self.account.output("name"),
                "resourceGroupName": resource_group_name,
                "managementPolicyName": "default",
                "policy": {
                    "rules": [
                        {
                            "name": "expire-etcd-snapshots",
                            "type": "Lifecycle",
                            "enabled": True,
                            "definition": {
                                # Snapshots only: the cluster-formed marker must outlive them (infra/etcd/backup.py).
                                "filters": {
                                    "blobTypes": ["blockBlob"],
                                    "prefixMatch": backup.lifecycle_prefixes(list(ROLES)),
                                },
                                "actions": {
                                    "baseBlob": {"delete": {"daysAfterModificationGreaterThan": backup.RETENTION_DAYS}},
                                    "version": {"delete": {"daysAfterCreationGreaterThan": backup.RETENTION_DAYS}},
                                },
                            },
                        }
                    ]
                },
            },
            pulumi.ResourceOptions(parent=self),
        )
        # Only etcd members (system VNet) use Blob storage privately; the zone is this resource group's.
        private_link(
            self,
            name,
            target_id=self.account.id,
            group_id="blob",
            zone_name=BLOB_PRIVATE_DNS_ZONE,
            endpoint_name=f"{self.account_name}-blob-pe",
            cluster_name=cluster_name,
            resource_group_name=resource_group_name,
            location=location,
            subnet_id=endpoint_subnet_id,
            vnet_ids={"system": vnet_id},
        )
        self.register_outputs({"accountName": self.account_name, "accountId": self.account.id})

    def add_container(
        self,
        owner: pulumi.Resource,
        logical_name: str,
        container_name: str,
        writer_role: str,
        writer_principal_id: pulumi.Input[str],
    ) -> declare.Declared:
        """A private container that survives its removal from the program, writable by one identity
        (``writer_role``'s); every resource is a child of ``owner``."""
        container = declare.azure(
            "storage:BlobContainer",
            logical_name,
            {
                "containerName": container_name,
                "accountName": self.account.output("name"),
                "resourceGroupName": self._resource_group_name,
                "publicAccess": "None",
            },
            pulumi.ResourceOptions(parent=owner, protect=True, retain_on_delete=True),
        )
        grant(
            owner,
            f"{logical_name}-{writer_role}-writer",
            key=f"{self._cluster_name}/etcd-backups/{container_name}/{writer_role}",
            scope=container.id,
            principal_id=writer_principal_id,
            role_definition_id=role_definition(self._subscription_id, STORAGE_BLOB_DATA_CONTRIBUTOR_ROLE),
        )
        return container
