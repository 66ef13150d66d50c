"""Day 2 on the real program, deploy by deploy: each step is the next ``pulumi up``, planned against the last
one's outputs, and its plan diff must take at most one NAT host down and no apiserver (a change to the apiservers
is a change of their scale set's model, which Azure rolls one instance at a time: tests/components/
test_control_plane.py reads the rendered policy) (docs/day2.md)."""

from __future__ import annotations

import pytest

from components.machines import IMAGE_PATH
from infra.config.errors import ConfigError
from infra.day2.deploy_rules import APISERVER_ROLE, NAT_HOST_ROLE, ROLLOUT_OUTPUT, RollingUpgrade
from plan.__main__ import EXIT_CHANGED, EXIT_OK, exit_code
from plan.diff import SCALE_SET_TYPE, VM_TYPE, diff_plans
from plan.runner import own_stack_name, run_program
from plan.stackfile import load_stack_config
from tests.conftest import as_plan, deploy_after, plan_stack

# The second stage of scripts/test.sh (tens of seconds): several deploys planned in sequence.
pytestmark = pytest.mark.slow

# dev with prod's shape where it matters here: several apiservers and NAT hosts.
SHAPE = ("controlPlane.apiservers=3", "network.natHosts.count=3")
AUTOSCALER = "kubernetes:apps/v1:Deployment"
# A new release's binaries come in a new machine image (infra/assembly/machine_image.py refuses a reused version).
NEW_IMAGE = "machineImageVersion=1.1.0"


@pytest.fixture(scope="module")
def steady():
    """dev deployed twice (the second deploy is what every later one is compared with)."""
    return deploy_after(plan_stack("dev", *SHAPE), *SHAPE)


def _step(previous, *overrides):
    after = deploy_after(previous, *SHAPE, *overrides)
    diff = diff_plans(as_plan(previous), as_plan(after))
    return after, diff


def _apiserver_model_changed(diff) -> bool:
    return any(c.type == SCALE_SET_TYPE and c.name.endswith("-control-plane-apiservers") for c in diff.resources)


def _node_models(diff) -> list[str]:
    return [c.name for c in diff.resources if c.type == SCALE_SET_TYPE and "-pool-" in c.name]


def _down(diff) -> list[tuple[str, str]]:
    """(action, VM) for every VM the deploy replaces or resizes."""
    return [
        (c.action, c.name.removeprefix("dev-"))
        for c in diff.resources
        if c.type == VM_TYPE and (c.action != "update" or "hardwareProfile.vmSize" in c.changed)
    ]


def _autoscaler_image(run) -> str:
    [deployment] = [r for r in run.of_type(AUTOSCALER) if r.inputs["metadata"]["name"] == "cluster-autoscaler"]
    return deployment.inputs["spec"]["template"]["spec"]["containers"][0]["image"]


def test_a_minor_upgrade_moves_the_apiserver_model_first_then_nodes_then_nat_hosts_one_per_deploy(steady):
    run, steps = steady, []
    for _ in range(5):
        run, diff = _step(run, "kubernetesVersion=1.34.1", NEW_IMAGE)
        steps.append((diff, run))
    downs = [_down(diff) for diff, _ in steps]
    assert downs == [
        [],  # the apiserver scale set's model: an update, rolled by Azure one instance at a time
        [("replace", "nat-hosts-0-vm")],  # with the node models and the autoscaler, once Azure has rolled it
        [("replace", "nat-hosts-1-vm")],
        [("replace", "nat-hosts-2-vm")],
        [],
    ]
    assert [_apiserver_model_changed(diff) for diff, _ in steps] == [True, False, False, False, False]
    assert steps[0][1].outputs[ROLLOUT_OUTPUT]["apiserverScaleSet"]["kubernetesVersion"] == "1.34.1"
    assert [exit_code(diff) for diff, _ in steps[:4]] == [EXIT_CHANGED] * 4
    assert exit_code(_step(run, "kubernetesVersion=1.34.1", NEW_IMAGE)[1]) == EXIT_OK
    for index, (diff, run) in enumerate(steps):
        nodes_move = index == 1
        assert bool(_node_models(diff)) == nodes_move, (index, _node_models(diff))
        assert (":v1.34." in _autoscaler_image(run)) == (index >= 1), index
        assert not diff.dangers, index
        # Nodes boot the image of the release they run: the old one until the apiservers are done.
        images = {
            r.inputs["virtualMachineProfile"]["storageProfile"]["imageReference"]["id"].rsplit("/", 1)[-1]
            for r in run.node_scale_sets()
        }
        assert images == {"1.1.0" if index >= 1 else "1.0.0"}, (index, images)
    assert ":v1.33." in _autoscaler_image(steady)


def test_a_new_machine_image_moves_the_apiserver_model_and_one_nat_host_per_deploy(steady):
    run, downs, models = steady, [], []
    for _ in range(4):
        run, diff = _step(run, NEW_IMAGE)
        downs.append(sorted(_down(diff)))
        models.append(_apiserver_model_changed(diff))
        assert exit_code(diff) == EXIT_CHANGED and not diff.dangers
    assert downs == [[("replace", f"nat-hosts-{i}-vm")] for i in range(3)] + [[]]
    assert models == [True, False, False, False]
    # The record the next deploy stages from: the apiserver model and every NAT host on the new image.
    rollout = run.outputs[ROLLOUT_OUTPUT]
    assert rollout["apiserverScaleSet"]["imageVersion"] == "1.1.0"
    assert {m["imageVersion"] for m in rollout["machines"][NAT_HOST_ROLE]} == {"1.1.0"}
    assert rollout["machines"][APISERVER_ROLE] == []
    # etcd members keep the image they booted (ignored): their runbook replaces them one at a time.
    etcd = [r for r in run.of_type(VM_TYPE) if "etcd" in r.name]
    assert etcd and all(IMAGE_PATH in r.options["ignoreChanges"] for r in etcd)


def test_a_patch_release_replaces_one_nat_host_per_deploy_never_all(steady):
    """Before: a kubernetesVersion bump re-rendered the NAT hosts' cloud-init and replaced all of them at once."""
    run, nat = steady, []
    for _ in range(5):
        run, diff = _step(run, "kubernetesVersion=1.33.5", NEW_IMAGE)
        nat.append([name for action, name in _down(diff) if name.startswith("nat")])
        assert len(_down(diff)) <= 1
    assert nat[1:4] == [["nat-hosts-0-vm"], ["nat-hosts-1-vm"], ["nat-hosts-2-vm"]]


def test_a_control_plane_resize_is_one_model_change_that_azure_rolls(steady):
    run, diff = _step(steady, "controlPlane.vmSize=Standard_E32ds_v5")
    assert _down(diff) == [] and _apiserver_model_changed(diff) and not diff.dangers
    [change] = [c for c in diff.resources if c.name.endswith("-control-plane-apiservers")]
    assert (change.action, "sku.name" in change.changed) == ("update", True)
    assert exit_code(_step(run, "controlPlane.vmSize=Standard_E32ds_v5")[1]) == EXIT_OK


@pytest.mark.parametrize(
    ("start", "target", "expected"),
    [
        ("1.33.4", "1.32.9", "1.33.4 or later: the cluster runs 1.33.4 and Kubernetes is never downgraded"),
        ("1.33.4", "1.33.3", "1.33.4 or later"),
        ("1.32.9", "1.34.1", "1.32.x or 1.33.x: one minor release at a time"),
    ],
)
def test_skew_rules_refuse_a_downgrade_or_a_skipped_minor(start, target, expected):
    first = plan_stack("dev", f"kubernetesVersion={start}")
    with pytest.raises(ConfigError) as refused:
        deploy_after(first, f"kubernetesVersion={target}")
    assert refused.value.key == "kubernetesVersion" and expected in str(refused.value)


def test_the_next_minor_waits_until_azure_has_rolled_the_apiservers_and_the_nodes_followed(steady):
    """The gate reads the scale set's rolling-upgrade state (before each deploy, from Azure; here given)."""
    start = deploy_after(plan_stack("dev", *SHAPE, "kubernetesVersion=1.32.9"), *SHAPE, "kubernetesVersion=1.32.9")
    midway, _ = _step(start, "kubernetesVersion=1.33.4", NEW_IMAGE)  # the apiserver model on 1.33.4
    rolling = RollingUpgrade({"runningStatus": {"code": "RollingForward"}, "progress": {"pendingInstanceCount": 2}}, ())
    later = ("kubernetesVersion=1.34.1", "machineImageVersion=1.2.0")
    config = load_stack_config("dev", [*SHAPE, *later])
    with pytest.raises(ConfigError) as refused:
        run_program("dev", config, {own_stack_name("dev"): midway.outputs}, rolling)
    assert "until its rollout is finished (the apiserver rolling upgrade is RollingForward" in str(refused.value)
    # While Azure still rolls the model, the nodes stay on the old release ...
    held = run_program(
        "dev", load_stack_config("dev", [*SHAPE, "kubernetesVersion=1.33.4", NEW_IMAGE]),
        {own_stack_name("dev"): midway.outputs}, rolling,
    )  # fmt: skip
    assert held.outputs[ROLLOUT_OUTPUT]["nodeKubernetesVersion"] == "1.32.9"
    # ... and once it is done they follow; the next minor waits for them.
    with pytest.raises(ConfigError) as refused:
        run_program("dev", config, {own_stack_name("dev"): midway.outputs})
    assert "until its rollout is finished (nodes still on 1.32.9)" in str(refused.value)
