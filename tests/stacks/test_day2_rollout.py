"""Day 2 on the real program, deploy by deploy: each step is the next ``pulumi up``, planned against the last
one's outputs, and its plan diff must take at most one apiserver or NAT host down (docs/day2.md)."""

from __future__ import annotations

import pytest

from components.machines import IMAGE_PATH
from infra.config.errors import ConfigError
from infra.day2.deploy_rules import APISERVER_ROLE, NAT_HOST_ROLE, ROLLOUT_OUTPUT
from plan.__main__ import EXIT_CHANGED, EXIT_OK, exit_code
from plan.diff import SCALE_SET_TYPE, VM_TYPE, diff_plans
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


def test_a_minor_upgrade_rolls_apiservers_first_then_nodes_then_nat_hosts_one_per_deploy(steady):
    run, steps = steady, []
    for _ in range(7):
        run, diff = _step(run, "kubernetesVersion=1.34.1", NEW_IMAGE)
        steps.append((diff, run))
    downs = [_down(diff) for diff, _ in steps]
    assert downs == [
        [("replace", "control-plane-vm-0-vm")],
        [("replace", "control-plane-vm-1-vm")],
        [("replace", "control-plane-vm-2-vm")],
        [("replace", "nat-hosts-0-vm")],  # with the node models and the autoscaler (below)
        [("replace", "nat-hosts-1-vm")],
        [("replace", "nat-hosts-2-vm")],
        [],
    ]
    assert [exit_code(diff) for diff, _ in steps] == [EXIT_CHANGED] * 7
    # The last step only puts NAT host 2 back to ignoring its cloud-init and image (resource options, nothing sent).
    assert {c for change in steps[-1][0].resources for c in change.changed} <= {
        "options.ignoreChanges[0]",
        "options.ignoreChanges[1]",
        "options.ignoreChanges[2]",
        "options.replaceOnChanges[0]",
        "options.replaceOnChanges[1]",
    }
    assert exit_code(_step(run, "kubernetesVersion=1.34.1", NEW_IMAGE)[1]) == EXIT_OK
    for index, (diff, run) in enumerate(steps):
        models = [c for c in diff.resources if c.type == SCALE_SET_TYPE]
        nodes_move = index == 3
        assert bool(models) == nodes_move, (index, [c.name for c in models])
        assert (":v1.34." in _autoscaler_image(run)) == (index >= 3), index
        assert not diff.dangers, index
        # Nodes boot the image of the release they run: the old one until the apiservers are done.
        images = {
            r.inputs["virtualMachineProfile"]["storageProfile"]["imageReference"]["id"].rsplit("/", 1)[-1]
            for r in run.of_type(SCALE_SET_TYPE)
        }
        assert images == {"1.1.0" if nodes_move or index > 3 else "1.0.0"}, (index, images)
    assert ":v1.33." in _autoscaler_image(steady)


def test_a_new_machine_image_replaces_one_apiserver_and_one_nat_host_per_deploy(steady):
    """Before: VMs ignored their image for good, so a new machine image never reached the control plane or the
    NAT hosts unless someone replaced them by hand."""
    run, downs = steady, []
    for _ in range(4):
        run, diff = _step(run, NEW_IMAGE)
        downs.append(sorted(_down(diff)))
        assert exit_code(diff) == EXIT_CHANGED and not diff.dangers
    assert downs == [[("replace", f"control-plane-vm-{i}-vm"), ("replace", f"nat-hosts-{i}-vm")] for i in range(3)] + [
        []
    ]
    # The record the next deploy stages from: every apiserver and NAT host now runs the new image.
    rolled = run.outputs[ROLLOUT_OUTPUT]["machines"]
    assert {m["imageVersion"] for role in (APISERVER_ROLE, NAT_HOST_ROLE) for m in rolled[role]} == {"1.1.0"}
    # etcd members keep the image they booted (ignored): their runbook replaces them one at a time.
    etcd = [r for r in run.of_type(VM_TYPE) if "etcd" in r.name]
    assert etcd and all(IMAGE_PATH in r.options["ignoreChanges"] for r in etcd)


def test_a_patch_release_replaces_one_nat_host_per_deploy_never_all(steady):
    """Before: a kubernetesVersion bump re-rendered the NAT hosts' cloud-init and replaced all of them at once."""
    run, nat = steady, []
    for _ in range(7):
        run, diff = _step(run, "kubernetesVersion=1.33.5", NEW_IMAGE)
        nat.append([name for action, name in _down(diff) if name.startswith("nat")])
        assert len(_down(diff)) <= 1
    assert nat[3:6] == [["nat-hosts-0-vm"], ["nat-hosts-1-vm"], ["nat-hosts-2-vm"]]


def test_a_control_plane_resize_is_staged_one_apiserver_per_deploy(steady):
    run, downs = steady, []
    for _ in range(4):
        run, diff = _step(run, "controlPlane.vmSize=Standard_E32ds_v5")
        downs.append(_down(diff))
        assert exit_code(diff) in (EXIT_CHANGED, EXIT_OK)
    assert downs == [[("update", f"control-plane-vm-{i}-vm")] for i in range(3)] + [[]]


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


def test_the_next_minor_waits_until_the_last_one_reached_every_apiserver_and_the_nodes(steady):
    start = deploy_after(plan_stack("dev", *SHAPE, "kubernetesVersion=1.32.9"), *SHAPE, "kubernetesVersion=1.32.9")
    midway, _ = _step(start, "kubernetesVersion=1.33.4", NEW_IMAGE)  # apiserver 0 of 3 on 1.33.4
    with pytest.raises(ConfigError) as refused:
        _step(midway, "kubernetesVersion=1.34.1", "machineImageVersion=1.2.0")
    assert "until its rollout is finished (apiservers 1, 2 not yet on 1.33.4)" in str(refused.value)
