"""One user-assigned managed identity per machine role.

A VM carries exactly one identity, its role's; Key Vault grants each identity read
access to individual secrets only (components/secret_store.py), so an etcd member
cannot read a node's bootstrap token and a node cannot read an etcd key.

The cluster autoscaler's identity ("autoscaler") is carried only by the system pools' nodes
(role ``system``: tainted, no tenant namespace may tolerate the taint), beside "node". It may change
exactly the scale sets it manages, one grant each; it reads the node resource group
(``naming.node_resource_group``, which holds nothing but scale sets) to list them, and joins the
node subnets. So no identity carried by a machine that runs tenant pods can change a machine
(docs/security.md, "A node").
"""

from __future__ import annotations

from collections.abc import Mapping

import pulumi

from components import declare
from components.grants import grant, role_definition
from infra.config import naming
from infra.facts import roles

# Built-in role "Virtual Machine Contributor": manage VMs and scale sets (Run Command included, which
# is why it is granted scale set by scale set, and carried only by the system pools); on the network
# only read and join (``Microsoft.Network/virtualNetworks/read``, ``.../subnets/join/action``), never write
# (learn.microsoft.com/azure/role-based-access-control/built-in-roles/compute#virtual-machine-contributor).
# What the cluster autoscaler's Azure provider documents for its identity, and the narrowest built-in role
# that holds ``Microsoft.Compute/virtualMachineScaleSets/write`` (the capacity change) and
# ``.../delete/action`` (removing one instance).
VIRTUAL_MACHINE_CONTRIBUTOR_ROLE = "9980e02c-c2be-4d73-94e8-173b1dc7cf3c"
# Built-in role "Reader": reads only, no action (built-in-roles/general#reader). The autoscaler lists the
# scale sets of its resource group (ARM_RESOURCE_GROUP) with it.
READER_ROLE = "acdd72a7-3385-48ef-bd42-f606fba81ae7"


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
        self.register_outputs(self.ids)


def grant_autoscaler(
    name: str,
    identities: RoleIdentities,
    *,
    cluster_name: str,
    node_resource_group_id: pulumi.Input[str],
    scale_set_ids: Mapping[str, pulumi.Input[str]],
    node_subnet_ids: Mapping[str, pulumi.Input[str]],
    subscription_id: pulumi.Input[str],
) -> None:
    """The autoscaler's grants: read the node group, change each scale set it manages, join each node subnet."""
    # Each scale set it manages, and each node subnet: growing a scale set puts new NICs into its subnet, and
    # Azure checks "subnets/join/action" there as a linked scope of the scale-set write (a 403
    # LinkedAuthorizationFailed otherwise); the same role on a subnet grants read and join, nothing on the VNet.
    # Two grants per shard (about 130 in prod) against Azure's 4,000 role assignments per subscription
    # (learn.microsoft.com/azure/role-based-access-control/troubleshoot-limits).
    grants = [("list-nodes", "nodes-reader", node_resource_group_id, READER_ROLE)] + [
        (f"{kind}-{shard}", f"{kind}/{shard}", scope, VIRTUAL_MACHINE_CONTRIBUTOR_ROLE)
        for kind, scopes in (("scale", scale_set_ids), ("join", node_subnet_ids))
        for shard, scope in sorted(scopes.items())
    ]
    _grant_each(name, identities, cluster_name, "autoscaler", roles.AUTOSCALER_IDENTITY, grants, subscription_id)


def grant_join_approver(
    name: str,
    identities: RoleIdentities,
    *,
    cluster_name: str,
    node_resource_group_id: pulumi.Input[str],
    nat_host_ids: Mapping[str, pulumi.Input[str]],
    nat_host_nic_ids: Mapping[str, pulumi.Input[str]],
    subscription_id: pulumi.Input[str],
) -> None:
    """The apiservers' read of the VMs a node may be: the node certificates' approver asks Azure Resource Manager
    for the VM a joining node names (its ``vmId`` and computer name) and for the NICs of a Node's VM (the addresses
    its serving certificate may name; infra/control_plane/csr_approval.py). Reader on the node group (every pool's
    scale-set instances and their NICs), on each NAT host and on each NAT host's NIC (a resource of its own, beside
    the VM), nothing else."""
    grants = [("nodes", "nodes", node_resource_group_id, READER_ROLE)] + [
        (f"{kind}-{host}", f"{kind}/{host}", scope, READER_ROLE)
        for kind, scopes in (("nat", nat_host_ids), ("nat-nic", nat_host_nic_ids))
        for host, scope in sorted(scopes.items())
    ]
    _grant_each(name, identities, cluster_name, "join-approver", roles.APISERVER.identity, grants, subscription_id)


def _grant_each(
    name: str,
    identities: RoleIdentities,
    cluster_name: str,
    purpose: str,
    role_identity: str,
    grants: list[tuple[str, str, pulumi.Input[str], str]],
    subscription_id: pulumi.Input[str],
) -> None:
    """One role assignment per ``(suffix, key, scope, built-in role)`` to the ``role_identity``, named and keyed
    by ``purpose``."""
    definitions = {role: role_definition(subscription_id, role) for role in sorted({g[3] for g in grants})}
    for suffix, key, scope, role in grants:
        grant(
            identities,
            f"{name}-{purpose}-{suffix}",
            key=f"{cluster_name}/{purpose}/{key}",
            scope=scope,
            principal_id=identities.principal_ids[role_identity],
            role_definition_id=definitions[role],
        )
