"""A cluster deployed before the node resource group existed is refused, not rebuilt.

Its scale sets sit in the cluster's own group; this release puts them in ``<cluster>-nodes-rg``.
Azure cannot move a scale set in place, so the plan would replace every node: the program stops
before it declares anything in Azure (the check waits on the last deploy's ``cluster`` output).
"""

from __future__ import annotations

import json

import pytest

from infra.config import naming
from infra.config.errors import ConfigError
from infra.day2.node_group import check_scale_sets_stay, previous_scale_set_groups
from plan import runner
from plan.stackfile import load_stack_config
from tests.conftest import azure_declared_before_refusal


def _with_scale_sets_in(outputs: dict, group: str) -> dict:
    text = json.dumps(outputs).replace(
        f"/resourceGroups/{naming.node_resource_group('dev')}/", f"/resourceGroups/{group}/"
    )
    return json.loads(text)


def test_scale_set_groups_are_read_from_the_contract(dev_plan):
    assert previous_scale_set_groups(None) == {}  # first deploy
    groups = previous_scale_set_groups(dev_plan.outputs["cluster"])
    assert groups and set(groups.values()) == {naming.node_resource_group("dev")}
    check_scale_sets_stay(dev_plan.outputs["cluster"], "dev")  # a redeploy of this release passes
    check_scale_sets_stay(None, "dev")
    check_scale_sets_stay(dev_plan.outputs["cluster"], "dev2")  # a rename: the plan diff flags it, not this


def test_scale_sets_in_another_group_are_refused_with_one_line(dev_plan):
    older = _with_scale_sets_in(dev_plan.outputs, naming.resource_group("dev"))
    with pytest.raises(ConfigError) as caught:
        check_scale_sets_stay(older["cluster"], "dev")
    message = str(caught.value)
    assert "\n" not in message and "dev-nodes-rg" in message and "replaces every node" in message


def test_a_refused_move_declares_nothing_in_azure(dev_plan, monkeypatch):
    older = _with_scale_sets_in(dev_plan.outputs, naming.resource_group("dev"))
    declared = azure_declared_before_refusal(
        monkeypatch,
        lambda: runner.run_program("dev", load_stack_config("dev", []), {runner.own_stack_name("dev"): older}),
        "replaces every node",
    )
    assert not declared
