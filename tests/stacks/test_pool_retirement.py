"""Removing a pool takes two deploys: the program refuses to drop a pool the last deploy had not retired.

The last deploy is the stack's own previous outputs, read through a StackReference to itself; the
offline plan answers it with ``--diff OLD_DIR``'s ``outputs.json``.
"""

from __future__ import annotations

import json

import pytest

from infra.config.cluster_config import parse_config
from infra.config.errors import ConfigError
from infra.day2.pool_retirement import check_pool_removals, previous_pools
from plan import runner
from plan.__main__ import EXIT_BAD_INPUT, EXIT_DANGER, main
from plan.artifacts import plan_files, write_plan
from plan.diff import diff_plans, load_plan
from plan.stackfile import load_stack_config
from tests.conftest import azure_declared_before_refusal
from tests.helpers import raw_stack

# dev without its gpu pool (its CPU pool cannot go: CoreDNS runs there): top-level values are strings, which
# the program decodes as JSON (components/stack_config.py), as `pulumi config set KEY VALUE` would give it.
REMOVE_GPU = ["--config", f"nodePools={json.dumps([p for p in raw_stack('dev')['nodePools'] if p['name'] != 'gpu'])}"]


def _previous(retired: dict[str, bool]) -> dict:
    return {"schemaVersion": "1.0", "nodePools": {name: {"retired": flag} for name, flag in retired.items()}}


def test_previous_pools_are_read_from_the_contract():
    assert previous_pools(None) == {}  # first deploy: no `cluster` output yet
    assert previous_pools({"schemaVersion": "1.0"}) == {}
    assert previous_pools(_previous({"gpu": False, "cpu": True})) == {"gpu": False, "cpu": True}
    assert previous_pools({"nodePools": {"cpu": {"retired": "true"}, "gpu": None}}) == {"cpu": False, "gpu": False}


@pytest.mark.parametrize(
    "previous,allowed",
    [
        (None, True),
        (_previous({"gpu": False, "cpu": False}), True),  # nothing removed
        (_previous({"gpu": False, "cpu": True, "old": True}), True),  # a retired pool removed
        (_previous({"gpu": False, "cpu": False, "old": False}), False),  # an unretired pool removed
    ],
)
def test_only_a_pool_retired_by_the_last_deploy_may_be_removed(previous, allowed):
    config = parse_config(raw_stack("dev"), "eastus")
    if allowed:
        check_pool_removals(previous, config)
        return
    with pytest.raises(ConfigError) as caught:
        check_pool_removals(previous, config)
    assert caught.value.key == "nodePools" and "pool old still listed" in str(caught.value)


def _plan_dir(run, directory):
    write_plan(directory, plan_files(run.registrations, run.outputs, ""))
    return directory


def test_removing_a_pool_the_last_deploy_had_not_retired_exits_2_with_one_line(dev_plan, tmp_path, capsys):
    old = _plan_dir(dev_plan, tmp_path / "old")
    out = tmp_path / "new"
    assert main(["--stack", "dev", "--out", str(out), "--diff", str(old), *REMOVE_GPU]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(
        "error: invalid config supercluster:nodePools = ['cpu', 'platform']: expected pool gpu still listed"
    )
    assert "retired: true" in err and "docs/runbooks/remove-a-pool.md" in err
    assert not out.exists(), "a refused plan leaves no plan directory"


def test_a_refused_removal_declares_nothing_in_azure(dev_plan, monkeypatch):
    """The check runs before the program declares anything: when it fails, not one resource reaches the engine
    (and Pulumi deletes only after a program that succeeded)."""
    config = load_stack_config("dev", REMOVE_GPU[1::2])
    declared = azure_declared_before_refusal(
        monkeypatch,
        lambda: runner.run_program("dev", config, {runner.own_stack_name("dev"): dev_plan.outputs}),
        "pool gpu still listed",
    )
    assert not declared


@pytest.mark.slow  # a sequence of whole-program runs (seconds)
def test_retiring_then_removing_a_pool_passes(retired_gpu_plan, tmp_path, capsys):
    old = _plan_dir(retired_gpu_plan, tmp_path / "retired")
    assert json.loads((old / "outputs.json").read_text())["cluster"]["nodePools"]["gpu"]["retired"] is True
    out = tmp_path / "removed"
    # The deletes are flagged (exit 4): the pool's scale sets and network are protected, unprotected by the runbook.
    assert main(["--stack", "dev", "--out", str(out), "--diff", str(old), *REMOVE_GPU]) == EXIT_DANGER
    assert "error:" not in capsys.readouterr().err
    diff = diff_plans(load_plan(old), load_plan(out))
    assert {c.action for c in diff.resources if "-gpu" in c.name} == {"delete"}
    assert {c.name for c in diff.dangers} >= {"dev-pool-gpu-s000", "dev-gpu"}  # the VNet, its subnets inline


def test_a_first_deploy_has_no_previous_outputs_and_passes(dev_plan):
    """dev_plan is a first deploy: it read no outputs of its own, and nothing was refused."""
    group = dev_plan.named("dev", "azure-native:resources:ResourceGroup")
    assert group.inputs["resourceGroupName"] == "dev-rg"
    assert dev_plan.outputs["cluster"]["nodePools"].keys() == {"gpu", "cpu", "platform"}
