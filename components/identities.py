"""One user-assigned managed identity per machine role.

A VM carries exactly one identity, its role's; Key Vault grants each identity read
access to individual secrets only (components/secret_store.py), so an etcd member
cannot read a node's bootstrap token and a node cannot read an etcd key.
"""

from __future__ import annotations

import pulumi
import pulumi_azure_native as azure

from components.grants import grant
from infra import naming

# "autoscaler" is the cluster autoscaler's (it runs on CPU nodes, whose scale sets carry it beside
# "node"); it may only change the cluster's scale sets (VM Contributor on the resource group).
# Built-in role "Virtual Machine Contributor": manage VMs and scale sets, not the network or access
# (learn.microsoft.com/azure/role-based-access-control/built-in-roles/compute#virtual-machine-contributor);
# what the cluster autoscaler's Azure provider documents for its identity.
VIRTUAL_MACHINE_CONTRIBUTOR_ROLE = "9980e02c-c2be-4d73-94e8-173b1dc7cf3c"
ROLES = ("etcd", "events-etcd", "apiserver", "node", "nat", "autoscaler")


class RoleIdentities(pulumi.ComponentResource):
    identities: dict[str, azure.managedidentity.UserAssignedIdentity]

    def __init__(self, name: str, *, cluster_name: str, resource_group_name: pulumi.Input[str],
                 resource_group_id: pulumi.Input[str], subscription_id: pulumi.Input[str], location: str,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("supercluster:identity:RoleIdentities", name, None, opts)
        self.identities = {
            role: azure.managedidentity.UserAssignedIdentity(
                f"{name}-{role}",
                resource_name_=naming.role_identity(cluster_name, role),
                resource_group_name=resource_group_name,
                location=location,
                opts=pulumi.ResourceOptions(parent=self),
            )
            for role in ROLES
        }
        autoscaler = self.identities["autoscaler"]
        grant(self, f"{name}-autoscaler-vm-contributor", key=f"{cluster_name}/autoscaler", scope=resource_group_id,
              principal_id=autoscaler.principal_id, role=VIRTUAL_MACHINE_CONTRIBUTOR_ROLE,
              subscription_id=subscription_id)
        self.register_outputs({role: identity.id for role, identity in self.identities.items()})
