"""One Azure RBAC grant: a built-in role for one identity on one scope.

Role assignment names must be GUIDs; deriving them from a stable key (``uuid5``) keeps
a re-plan from replacing a grant that exists.
"""

from __future__ import annotations

import functools
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
    of the role: a 30,000-node cluster grants the autoscaler one role on each of its 500 scale sets and subnets.
    One apply of the subscription's Output, not ``Output.concat``, which lifts each part into an Output first."""
    subscription = (
        subscription_id if isinstance(subscription_id, pulumi.Output) else pulumi.Output.from_input(subscription_id)
    )
    return subscription.apply(functools.partial(_role_definition_id, role=role))


def _role_definition_id(subscription_id: str, role: str) -> str:
    return f"/subscriptions/{subscription_id}/providers/Microsoft.Authorization/roleDefinitions/{role}"
