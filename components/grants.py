"""One Azure RBAC grant: a built-in role for one identity on one scope.

Role assignment names must be GUIDs; deriving them from a stable key (``uuid5``) keeps
a re-plan from replacing a grant that exists.
"""

from __future__ import annotations

import uuid

import pulumi

from components import declare


def grant(
    owner: pulumi.Resource,
    logical_name: str,
    *,
    key: str,
    scope: pulumi.Input[str],
    principal_id: pulumi.Input[str],
    role_definition_id: pulumi.Input[str],
) -> declare.Declared:
    """``role_definition_id``: from ``role_definition``; ``key`` names the grant uniquely within the tenant."""
    return declare.azure(
        "authorization:RoleAssignment",
        logical_name,
        {
            "roleAssignmentName": str(uuid.uuid5(uuid.NAMESPACE_URL, f"supercluster/{key}")),
            "scope": scope,
            "principalId": principal_id,
            "principalType": "ServicePrincipal",
            "roleDefinitionId": role_definition_id,
        },
        pulumi.ResourceOptions(parent=owner),
    )


def role_definition(subscription_id: pulumi.Input[str], role: str) -> pulumi.Output[str]:
    """A built-in role's definition in the subscription (``role`` is its GUID). One Output serves every grant
    of the role: a 30,000-node cluster grants the autoscaler one role on each of its 500 scale sets and subnets."""
    return pulumi.Output.concat(
        "/subscriptions/", subscription_id, "/providers/Microsoft.Authorization/roleDefinitions/", role
    )
