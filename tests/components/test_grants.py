"""The autoscaler's grants (components/identities.py): two per shard, whose cost in a plan must stay the
resources' own (docs/performance.md)."""

from __future__ import annotations

import pulumi
import pytest

from components.identities import RoleIdentities, grant_autoscaler
from plan.runner import run_declarations

ROLE_ASSIGNMENT = "azure-native:authorization:RoleAssignment"


def autoscaler_grants(shards: int):
    def declare() -> None:
        identities = RoleIdentities("c", cluster_name="c", resource_group_name="rg", location="eastus")
        grant_autoscaler(
            "c",
            identities,
            cluster_name="c",
            node_resource_group_id="/subscriptions/s/resourceGroups/nodes",
            scale_set_ids={f"pool-s{i:03}": f"/vmss/{i}" for i in range(shards)},
            node_subnet_ids={f"pool-s{i:03}": f"/subnet/{i}" for i in range(shards)},
            subscription_id=pulumi.Output.from_input("s"),
        )

    return declare


def test_every_autoscaler_grant_names_its_roles_definition_in_the_subscription():
    run = run_declarations(autoscaler_grants(3))
    definitions = {r.name: r.inputs["roleDefinitionId"] for r in run.of_type(ROLE_ASSIGNMENT)}
    assert len(definitions) == 1 + 2 * 3
    prefix = "/subscriptions/s/providers/Microsoft.Authorization/roleDefinitions/"
    assert all(value.startswith(prefix) for value in definitions.values())
    assert len(set(definitions.values())) == 2, "the node group reader; the scale sets' and subnets' contributor"


def test_one_role_definition_output_per_role_however_many_shards(monkeypatch: pytest.MonkeyPatch):
    from components import identities

    made = []
    role_definition = identities.role_definition

    def counted(subscription_id, role):
        made.append(role)
        return role_definition(subscription_id, role)

    monkeypatch.setattr(identities, "role_definition", counted)
    run_declarations(autoscaler_grants(40))
    assert len(made) == 2, "an Output per grant costs a 30,000-node plan a tenth of a second"
