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
    role: str,
    subscription_id: pulumi.Input[str],
) -> declare.Declared:
    """``role`` is a built-in role definition GUID; ``key`` names the grant uniquely within the tenant."""
    return declare.azure(
        "authorization:RoleAssignment",
        logical_name,
        {
            "roleAssignmentName": str(uuid.uuid5(uuid.NAMESPACE_URL, f"supercluster/{key}")),
            "scope": scope,
            "principalId": principal_id,
            "principalType": "ServicePrincipal",
            "roleDefinitionId": pulumi.Output.concat(
                "/subscriptions/", subscription_id, "/providers/Microsoft.Authorization/roleDefinitions/", role
            ),
        },
        pulumi.ResourceOptions(parent=owner),
    )
