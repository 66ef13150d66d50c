"""One user-assigned managed identity per machine role.

A VM carries exactly one identity, its role's; Key Vault grants each identity read
access to individual secrets only (components/secret_store.py), so an etcd member
cannot read a node's bootstrap token and a node cannot read an etcd key.

The cluster autoscaler's identity ("autoscaler", carried by CPU nodes beside "node") changes
only the node pools' scale sets: they live in a resource group of their own
(``naming.node_resource_group``), which holds nothing else, so its role never reaches an etcd
member, an apiserver, a NAT host or the Key Vault (docs/security.md, finding 1).
"""

from __future__ import annotations

from collections.abc import Mapping

import pulumi

from components import declare
from components.grants import grant
from infra import naming
from infra.facts import roles

# Built-in role "Virtual Machine Contributor": manage VMs and scale sets (Run Command included, which
# is why its scope must hold nothing but node scale sets); on the network only read and join
# (``Microsoft.Network/virtualNetworks/read``, ``.../subnets/join/action``), never write
# (learn.microsoft.com/azure/role-based-access-control/built-in-roles/compute#virtual-machine-contributor).
# What the cluster autoscaler's Azure provider documents for its identity.
VIRTUAL_MACHINE_CONTRIBUTOR_ROLE = "9980e02c-c2be-4d73-94e8-173b1dc7cf3c"


class RoleIdentities(pulumi.ComponentResource):
    """Per role: ``ids`` (what a VM or scale set carries), ``principal_ids`` (what grants name) and
    ``client_ids`` (what a workload signs in with)."""

    ids: dict[str, pulumi.Output[str]]
    principal_ids: dict[str, pulumi.Output[str]]
    client_ids: dict[str, pulumi.Output[str]]

    def __init__(
        self,
        name: str,
        *,
        cluster_name: str,
        resource_group_name: pulumi.Input[str],
        node_resource_group_id: pulumi.Input[str],
        node_subnet_ids: Mapping[str, pulumi.Input[str]],
        subscription_id: pulumi.Input[str],
        location: str,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("supercluster:identity:RoleIdentities", name, None, opts)
        identities = {
            role: declare.azure(
                "managedidentity:UserAssignedIdentity",
                f"{name}-{role}",
                {
                    "resourceName": naming.role_identity(cluster_name, role),
                    "resourceGroupName": resource_group_name,
                    "location": location,
                },
                pulumi.ResourceOptions(parent=self),
                outputs=["principalId", "clientId"],
            )
            for role in roles.IDENTITIES
        }
        self.ids = {role: identity.id for role, identity in identities.items()}
        self.principal_ids = {role: identity.output("principalId") for role, identity in identities.items()}
        self.client_ids = {role: identity.output("clientId") for role, identity in identities.items()}
        # The autoscaler lists, scales and deletes the node scale sets: the node group and nothing else.
        grant(
            self,
            f"{name}-autoscaler-vm-contributor",
            key=f"{cluster_name}/autoscaler/nodes",
            scope=node_resource_group_id,
            principal_id=self.principal_ids[roles.AUTOSCALER_IDENTITY],
            role=VIRTUAL_MACHINE_CONTRIBUTOR_ROLE,
            subscription_id=subscription_id,
        )
        # Growing a scale set puts new NICs into its subnet: Azure checks "subnets/join/action" on the
        # subnet as a linked scope of the scale-set write (a 403 LinkedAuthorizationFailed otherwise).
        # The same role on each node subnet grants read and join there, and nothing on the VNet. One grant
        # per shard (62 in prod, 124 grants in all) against Azure's 4,000 role assignments per subscription
        # (learn.microsoft.com/azure/role-based-access-control/troubleshoot-limits).
        for shard, subnet_id in sorted(node_subnet_ids.items()):
            grant(
                self,
                f"{name}-autoscaler-join-{shard}",
                key=f"{cluster_name}/autoscaler/join/{shard}",
                scope=subnet_id,
                principal_id=self.principal_ids[roles.AUTOSCALER_IDENTITY],
                role=VIRTUAL_MACHINE_CONTRIBUTOR_ROLE,
                subscription_id=subscription_id,
            )
        self.register_outputs(self.ids)
