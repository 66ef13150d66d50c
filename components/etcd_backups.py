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
import pulumi_azure_native as azure

from components.grants import grant
from components.private_link import private_link
from infra.etcd import backup

# Built-in role "Storage Blob Data Contributor": read, write and delete blobs
# (learn.microsoft.com/azure/role-based-access-control/built-in-roles/storage#storage-blob-data-contributor).
STORAGE_BLOB_DATA_CONTRIBUTOR_ROLE = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
# Private Link DNS zone for Blob storage (learn.microsoft.com/azure/private-link/private-endpoint-dns).
BLOB_PRIVATE_DNS_ZONE = "privatelink.blob.core.windows.net"


class EtcdBackupStore(pulumi.ComponentResource):
    account: azure.storage.StorageAccount
    account_name: str

    def __init__(self, name: str, *, cluster_name: str, resource_group_name: pulumi.Input[str], location: str,
                 subscription_id: pulumi.Input[str], endpoint_subnet_id: pulumi.Input[str],
                 vnet_id: pulumi.Input[str], opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("supercluster:etcd:EtcdBackupStore", name, None, opts)
        self._cluster_name = cluster_name
        self._resource_group_name = resource_group_name
        self._subscription_id = subscription_id
        self.account_name = backup.storage_account_name(cluster_name)
        self.account = azure.storage.StorageAccount(
            f"{name}-account",
            account_name=self.account_name,
            resource_group_name=resource_group_name,
            location=location,
            kind="StorageV2",
            # Zone-redundant, like the members whose state it keeps.
            sku=azure.storage.SkuArgs(name="Standard_ZRS"),
            access_tier="Hot",
            allow_shared_key_access=False,
            default_to_o_auth_authentication=True,
            allow_blob_public_access=False,
            allow_cross_tenant_replication=False,
            public_network_access="Disabled",
            network_rule_set=azure.storage.NetworkRuleSetArgs(default_action="Deny", bypass="None"),
            enable_https_traffic_only=True,
            minimum_tls_version="TLS1_2",
            opts=pulumi.ResourceOptions(parent=self, protect=True),
        )
        azure.storage.BlobServiceProperties(
            f"{name}-blob-service",
            account_name=self.account.name,
            resource_group_name=resource_group_name,
            blob_services_name="default",
            is_versioning_enabled=True,
            delete_retention_policy=azure.storage.DeleteRetentionPolicyArgs(
                enabled=True, days=backup.SOFT_DELETE_DAYS),
            container_delete_retention_policy=azure.storage.DeleteRetentionPolicyArgs(
                enabled=True, days=backup.SOFT_DELETE_DAYS),
            opts=pulumi.ResourceOptions(parent=self),
        )
        azure.storage.ManagementPolicy(
            f"{name}-lifecycle",
            account_name=self.account.name,
            resource_group_name=resource_group_name,
            management_policy_name="default",
            policy=azure.storage.ManagementPolicySchemaArgs(rules=[azure.storage.ManagementPolicyRuleArgs(
                name="expire-etcd-snapshots",
                type="Lifecycle",
                enabled=True,
                definition=azure.storage.ManagementPolicyDefinitionArgs(
                    filters=azure.storage.ManagementPolicyFilterArgs(blob_types=["blockBlob"]),
                    actions=azure.storage.ManagementPolicyActionArgs(
                        base_blob=azure.storage.ManagementPolicyBaseBlobArgs(
                            delete=azure.storage.DateAfterModificationArgs(
                                days_after_modification_greater_than=backup.RETENTION_DAYS)),
                        version=azure.storage.ManagementPolicyVersionArgs(
                            delete=azure.storage.DateAfterCreationArgs(
                                days_after_creation_greater_than=backup.RETENTION_DAYS)),
                    ),
                ),
            )]),
            opts=pulumi.ResourceOptions(parent=self),
        )
        # Only etcd members (system VNet) use Blob storage privately; the zone is this resource group's.
        private_link(self, name, target_id=self.account.id, group_id="blob", zone_name=BLOB_PRIVATE_DNS_ZONE,
                     endpoint_name=f"{self.account_name}-blob-pe", cluster_name=cluster_name,
                     resource_group_name=resource_group_name, location=location, subnet_id=endpoint_subnet_id,
                     vnet_ids={"system": vnet_id})
        self.register_outputs({"accountName": self.account_name, "accountId": self.account.id})

    def add_container(self, owner: pulumi.Resource, logical_name: str, container_name: str, writer_role: str,
                      writer_principal_id: pulumi.Input[str]) -> azure.storage.BlobContainer:
        """A private container that survives its removal from the program, writable by one identity
        (``writer_role``'s); every resource is a child of ``owner``."""
        container = azure.storage.BlobContainer(
            logical_name,
            container_name=container_name,
            account_name=self.account.name,
            resource_group_name=self._resource_group_name,
            public_access="None",
            opts=pulumi.ResourceOptions(parent=owner, protect=True, retain_on_delete=True),
        )
        grant(owner, f"{logical_name}-{writer_role}-writer",
              key=f"{self._cluster_name}/etcd-backups/{container_name}/{writer_role}", scope=container.id,
              principal_id=writer_principal_id, role=STORAGE_BLOB_DATA_CONTRIBUTOR_ROLE,
              subscription_id=self._subscription_id)
        return container
