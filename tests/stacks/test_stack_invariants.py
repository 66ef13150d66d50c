"""Invariants every resource of both real stacks keeps, whichever component declared it."""

from __future__ import annotations

import json

import pytest

from tests.conftest import plan_stack

STACK_URN = "pulumi:pulumi:Stack"


@pytest.fixture(params=["dev", "prod"])
def stack_plan(request, dev_plan, prod_plan):
    return {"dev": dev_plan, "prod": prod_plan}[request.param]


def test_children_are_named_after_their_component(stack_plan):
    components = {r.urn: r for r in stack_plan.registrations if not r.custom}
    for r in stack_plan.registrations:
        parent = components.get(r.parent)
        if parent is not None:
            assert r.name.startswith(parent.name), f"{r.urn} is not named after its component {parent.name}"


def test_only_the_resource_groups_and_components_sit_at_the_root(stack_plan):
    root = f"{STACK_URN}::supercluster-{stack_plan.stack}"
    at_root = [r for r in stack_plan.registrations if r.parent.endswith(root)]
    # The cluster's group and its node group (the node scale sets alone: docs/security.md, "A node").
    assert [r.type for r in at_root if r.custom] == ["azure-native:resources:ResourceGroup"] * 2


def test_stateful_network_pieces_are_protected(stack_plan):
    for typ in (
        "azure-native:resources:ResourceGroup",
        "azure-native:network:VirtualNetwork",
        "azure-native:network:VirtualNetworkPeering",
        "azure-native:keyvault:Vault",
    ):
        found = stack_plan.of_type(typ)
        assert found, typ
        assert all(r.options["protect"] for r in found), typ


def test_plans_are_deterministic(dev_plan):
    again = plan_stack("dev")
    assert json.dumps([r.as_json() for r in again.registrations]) == json.dumps(
        [r.as_json() for r in dev_plan.registrations]
    )
    assert again.outputs == dev_plan.outputs


def test_tag_names_are_ones_azure_accepts(stack_plan):
    """Azure refuses tag names holding < > % & \\ ? / (learn.microsoft.com, "Use tags to organize your
    Azure resources", limitations); a Kubernetes-style key must be written with "_" instead of "/"."""
    bad = {
        (r.name, key)
        for r in stack_plan.registrations
        for key in (r.inputs.get("tags") or {})
        if any(ch in key for ch in "<>%&\\?/") or len(key) > 512
    }
    assert bad == set()
