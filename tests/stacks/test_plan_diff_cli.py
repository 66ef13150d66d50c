"""``python -m plan --diff`` on the real stacks: exit codes and exactly the resources a change touches."""

from __future__ import annotations

import json
import shutil

import pytest

from infra.control_plane.admission import NODE_LABELS_POLICY
from infra.day2.deploy_rules import ROLLOUT_OUTPUT
from plan.__main__ import EXIT_BAD_INPUT, EXIT_CHANGED, EXIT_DANGER, EXIT_OK, main
from plan.diff import diff_plans, load_plan

# The second stage of scripts/test.sh (tens of seconds): the plan CLI run as a process against earlier plans.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def dev_plan_dir(tmp_path_factory):
    """dev as deployed twice: the first deploy creates the scale sets with their initial capacity, every later
    one sends none (docs/day2.md), so a steady stack is the second."""
    out = tmp_path_factory.mktemp("plans") / "dev"
    assert main(["--stack", "dev", "--out", str(out)]) == EXIT_OK
    assert main(["--stack", "dev", "--out", str(out), "--diff", str(out)]) == EXIT_CHANGED
    assert main(["--stack", "dev", "--out", str(out), "--diff", str(out)]) == EXIT_OK
    return out


def test_an_unchanged_stack_exits_0(dev_plan_dir, tmp_path, capsys):
    assert main(["--stack", "dev", "--out", str(tmp_path / "new"), "--diff", str(dev_plan_dir)]) == EXIT_OK
    assert "No changes" in capsys.readouterr().out
    assert "No changes" in (tmp_path / "new" / "diff.md").read_text()


def test_diff_against_the_output_directory_itself(dev_plan_dir, tmp_path):
    out = tmp_path / "dev"
    shutil.copytree(dev_plan_dir, out)
    grow = ["--stack", "dev", "--out", str(out), "--diff", str(out), "--config", "nodePools[0].maxNodes=150"]
    assert main(grow) == EXIT_CHANGED
    created = load_plan(out)
    # The next deploy no longer sends the new shard its initial capacity (docs/day2.md); then nothing changes.
    assert main(grow) == EXIT_CHANGED
    assert [(c.name, c.changed) for c in diff_plans(created, load_plan(out)).resources] == [
        ("dev-pool-gpu-s001", ("sku.capacity",))
    ]
    assert main(grow) == EXIT_OK


def test_growing_a_pool_names_exactly_the_resources_it_touches(dev_plan_dir, tmp_path, capsys):
    new_dir = tmp_path / "grown"
    code = main(
        ["--stack", "dev", "--out", str(new_dir), "--diff", str(dev_plan_dir), "--config", "nodePools[0].maxNodes=150"]
    )
    report = capsys.readouterr().out
    assert code == EXIT_CHANGED
    old, new = load_plan(dev_plan_dir), load_plan(new_dir)
    diff = diff_plans(old, new)
    # Ground truth: every URN whose declaration differs between the two plans, and nothing else.
    touched = {
        urn
        for urn in old.resources.keys() | new.resources.keys()
        if json.dumps(old.resources.get(urn)) != json.dumps(new.resources.get(urn))
    }
    assert {change.urn for change in diff.resources} == touched
    created = [change.name for change in diff.of("create")]
    assert created and all("gpu-s001" in name for name in created), created  # only the new shard is new
    assert not diff.of("replace") and not diff.of("delete") and not diff.dangers
    for change in diff.resources:
        assert f"`{change.name}`" in report
    for path in list(diff.files_changed) + diff.files_added:
        assert f"files/{path}" in report


def test_a_directory_that_is_not_a_plan_is_a_clear_error(tmp_path, capsys):
    assert main(["--stack", "dev", "--out", str(tmp_path / "new"), "--diff", str(tmp_path)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a plan directory (no resources.json)" in err
    assert not (tmp_path / "new").exists()


def test_bad_config_with_diff_still_exits_2(dev_plan_dir, tmp_path, capsys):
    assert (
        main(
            [
                "--stack",
                "dev",
                "--out",
                str(tmp_path / "new"),
                "--diff",
                str(dev_plan_dir),
                "--config",
                "etcd.members=3",
            ]
        )
        == EXIT_BAD_INPUT
    )  # dev runs 1: one member per deploy
    assert "etcd.members = 3" in capsys.readouterr().err


def test_renaming_a_deployed_cluster_is_refused_naming_the_rebuild_path(dev_plan_dir, tmp_path, capsys):
    code = main(
        [
            "--stack",
            "dev",
            "--out",
            str(tmp_path / "renamed"),
            "--diff",
            str(dev_plan_dir),
            "--config",
            "clusterName=dev2",
        ]
    )
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT and err.count("\n") == 1
    assert (
        err.startswith(
            "error: invalid config supercluster:clusterName = 'dev2': expected 'dev' as in the last "
            "deploy: it cannot change on a live cluster"
        )
        and "build a new cluster beside" in err
    )


def test_renaming_the_cluster_flags_every_protected_resource_it_would_replace(dev_plan_dir, tmp_path, capsys):
    """Without the last deploy's outputs (another stack's plan as OLD_DIR), the diff itself still flags it."""
    code = main(
        [
            "--stack",
            "dev",
            "--out",
            str(tmp_path / "renamed"),
            "--diff",
            str(dev_plan_dir),
            "--stack-outputs",
            str(_no_previous_outputs(tmp_path)),
            "--config",
            "clusterName=dev2",
        ]
    )
    report = capsys.readouterr().out
    assert code == EXIT_DANGER
    diff = diff_plans(load_plan(dev_plan_dir), load_plan(tmp_path / "renamed"))
    flagged = {change.type for change in diff.dangers}
    assert {
        "azure-native:resources:ResourceGroup",
        "azure-native:network:VirtualNetwork",
        "azure-native:keyvault:Vault",
    } <= flagged
    protected = {r["urn"] for r in load_plan(dev_plan_dir).resources.values() if r["options"]["protect"]}
    assert protected <= {c.urn for c in diff.dangers} | {c.previous_urn for c in diff.dangers}, (
        "every protected resource the rename touches is flagged"
    )
    assert report.startswith("## Plan diff") and "> [!CAUTION]" in report


def test_a_rendered_file_change_names_exactly_the_pool_and_its_files(dev_plan_dir, tmp_path, capsys):
    """A config change that edits one line of a node's files (here the kubelet's node labels)."""
    code = main(
        [
            "--stack",
            "dev",
            "--out",
            str(tmp_path / "labelled"),
            "--diff",
            str(dev_plan_dir),
            "--config",
            "nodePools[1].labels.team=vision",
        ]
    )
    report = capsys.readouterr().out
    assert code == EXIT_CHANGED
    diff = diff_plans(load_plan(dev_plan_dir), load_plan(tmp_path / "labelled"))
    # The pool's scale set, and the node-labels admission policy that admits only the labels each
    # pool's kubelet registers with (infra/control_plane/admission.py): nothing else.
    assert sorted((c.action, c.type) for c in diff.resources) == [
        ("update", "azure-native:compute:VirtualMachineScaleSet"),
        ("update", "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"),
    ]
    [policy] = [c for c in diff.resources if c.type.endswith("ValidatingAdmissionPolicy")]
    assert policy.name.endswith(NODE_LABELS_POLICY)
    [scale_set] = [c for c in diff.resources if c.type.endswith("VirtualMachineScaleSet")]
    assert "cpu-s000" in scale_set.name
    assert "virtualMachineProfile.osProfile.customData" in scale_set.changed
    assert sorted(diff.files_changed) == [
        f"{scale_set.name}/cloud-init.yaml",
        f"{scale_set.name}/etc/systemd/system/kubelet.service",
        f"k8s/_cluster/ValidatingAdmissionPolicy-{NODE_LABELS_POLICY}.yaml",
    ]
    assert "+  --node-labels=" in report and "team=vision" in report


def _no_previous_outputs(tmp_path):
    path = tmp_path / "none.json"
    path.write_text(json.dumps({"organization/supercluster/dev": {}}))
    return path


def test_the_apiserver_rollout_az_reports_holds_the_nodes_back_until_it_is_done(dev_plan_dir, tmp_path, capsys):
    """``--apiserver-rollout`` gives the offline plan what a deploy reads from Azure (components/stack_config.py):
    while the scale set's rolling upgrade runs, a deploy leaves the nodes on their release; once every instance
    is on the model, they follow."""
    upgrade = ["--config", "kubernetesVersion=1.34.0", "--config", "machineImageVersion=1.1.0"]
    model = tmp_path / "model"
    assert main(["--stack", "dev", "--out", str(model), "--diff", str(dev_plan_dir), *upgrade]) == EXIT_CHANGED
    node_release = load_plan(dev_plan_dir).outputs[ROLLOUT_OUTPUT]["nodeKubernetesVersion"]
    assert load_plan(model).outputs[ROLLOUT_OUTPUT]["nodeKubernetesVersion"] == node_release
    rolling = tmp_path / "rolling.json"
    rolling.write_text(
        json.dumps({"latest": {"runningStatus": {"code": "RollingForward"}}, "latestModelApplied": [False]})
    )
    held = ["--stack", "dev", "--out", str(tmp_path / "held"), "--diff", str(model), *upgrade]
    assert main([*held, "--apiserver-rollout", str(rolling)]) == EXIT_OK
    assert load_plan(tmp_path / "held").outputs[ROLLOUT_OUTPUT]["nodeKubernetesVersion"] == node_release
    rolling.write_text(json.dumps({"latest": {"runningStatus": {"code": "Completed"}}, "latestModelApplied": [True]}))
    followed = ["--stack", "dev", "--out", str(tmp_path / "followed"), "--diff", str(model), *upgrade]
    assert main([*followed, "--apiserver-rollout", str(rolling)]) == EXIT_CHANGED
    assert load_plan(tmp_path / "followed").outputs[ROLLOUT_OUTPUT]["nodeKubernetesVersion"] == "1.34.0"
    capsys.readouterr()
    rolling.write_text(json.dumps({"latest": None, "latestModelApplied": "all"}))
    assert main([*followed, "--apiserver-rollout", str(rolling)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid config --apiserver-rollout" in err and "latestModelApplied" in err
