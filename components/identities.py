"""One user-assigned managed identity per machine role.

A VM carries exactly one identity, its role's; Key Vault grants each identity read
access to individual secrets only (components/secret_store.py), so an etcd member
cannot read a node's bootstrap token and a node cannot read an etcd key.
"""

from __future__ import annotations

import pulumi
import pulumi_azure_native as azure

ROLES = ("etcd", "events-etcd", "apiserver", "node", "nat")


class RoleIdentities(pulumi.ComponentResource):
    identities: dict[str, azure.managedidentity.UserAssignedIdentity]

    def __init__(self, name: str, *, resource_group_name: pulumi.Input[str], location: str,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("supercluster:identity:RoleIdentities", name, None, opts)
        self.identities = {
            role: azure.managedidentity.UserAssignedIdentity(
                f"{name}-{role}",
                resource_name_=f"{name}-{role}",
                resource_group_name=resource_group_name,
                location=location,
                opts=pulumi.ResourceOptions(parent=self),
            )
            for role in ROLES
        }
        self.register_outputs({role: identity.id for role, identity in self.identities.items()})
