"""The program's Kubernetes upgrade, applied to prod's control plane in the box deploy by deploy, under load.

Each deploy is the program's own: ``python -m plan --stack prod`` at the next minor (the release
scripts/build-upgrade-binaries.sh builds) with a new machine image, planned against the deploy before, whose
outputs it reads as its last deploy's (the ``rollout`` record it stages from), as ``pulumi up`` reads the
stack's, and given where the box's apiserver scale set stands (``--apiserver-rollout``: what a deploy reads
from Azure before it plans). The first deploy changes the apiserver scale set's model; the box then rolls it
out as Azure would, one instance per batch, gated on the rendered health signal (tests/e2e/rolling_upgrade.py).
The deploys after it move the node models and the NAT hosts one per deploy, until a deploy moves nothing.
Each deploy's in-cluster objects are applied.

The fault suite's background load runs throughout (tests/e2e/faults.py: the simulated fleet renewing its
Leases, the writer creating ConfigMaps through the load balancer). After every upgraded instance and every
deploy the test checks the version-skew rules on what the box runs, that the program's record says what the
box runs, that nodes get the new release only once every instance is on the model, and that nothing
acknowledged is lost. Marked ``faults``: run by the command in docs/reliability.md, not in CI.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from infra.control_plane.paths import CONTROLLER_MANAGER_UNIT, SCHEDULER_UNIT
from infra.day2.deploy_rules import APISERVER_ROLE, APISERVER_SCALE_SET_RECORD, ROLLOUT_OUTPUT
from plan.diff import VM_TYPE, diff_plans, load_plan
from tests.e2e.cluster import Cluster, apply_objects, boot, plan_stack
from tests.e2e.faults import (
    FLEET_NODES,
    QUIET_S,
    SCHEDULER_CONFIG,
    SLO_MUTATING_S,
    WRITER_WORKERS,
    WRITES_PER_S,
    ApiserverReplaced,
    BackgroundLoad,
    assert_nothing_lost,
    record,
    start_load,
    steady,
)
from tests.e2e.plan_machines import Machine, Plan
from tests.e2e.rolling_upgrade import ApiserverScaleSet, model_changed
from tests.e2e.version_skew import minor, skew_violations
from tests.helpers import built_folder

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

# A new release's binaries come in a new machine image: the program refuses a reused version (docs/day2.md).
NEW_IMAGE_VERSION = "1.1.0"
# prod's upgrade: the apiserver scale set's model (rolled by Azure after the deploy), then the node models with
# NAT host 0, then a NAT host per deploy, then the deploy that moves nothing. A few more before the test gives up
# on an upgrade that never ends.
MAX_DEPLOYS = 8
LOOPBACK = ("127.0.0.1", "localhost")


@pytest.fixture(scope="module")
def new_image(binaries: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The new machine image's binaries: the next minor's Kubernetes (built once per machine, then cached),
    everything else (etcd, kube-scheduler, the node runtime) the same release as before."""
    built = built_folder("build-upgrade-binaries.sh", timeout=3000)
    image = tmp_path_factory.mktemp("new-image")
    for source in (binaries, built):
        for binary in source.iterdir():
            if not binary.name.startswith("."):
                (image / binary.name).unlink(missing_ok=True)
                (image / binary.name).symlink_to(binary)
    return image


def _kubeconfig_server(machine: Machine, unit: str) -> str:
    """The host the component's rendered kubeconfig sends it to."""
    if unit == SCHEDULER_UNIT:
        config = yaml.safe_load((machine.files / SCHEDULER_CONFIG).read_text())
        path = config["clientConnection"]["kubeconfig"]
    else:
        (path,) = [a.split("=", 1)[1] for a in machine.unit(unit).exec_start if a.startswith("--kubeconfig=")]
    kubeconfig = yaml.safe_load((machine.files / path.lstrip("/")).read_text())
    (cluster,) = kubeconfig["clusters"]
    return cluster["cluster"]["server"].split("://")[1].rsplit(":", 1)[0]


def running_versions(cluster: Cluster) -> dict:
    """What the box runs: each apiserver's /version, each controller-manager's and scheduler's binary (and
    the apiserver it talks to), and how many nodes run each kubelet release."""
    apiservers, components = {}, {}
    for machine, host, _ in cluster.control_plane:
        status, body = cluster.raw("/version", url=f"https://{machine.ip}:6443", timeout=10)
        assert status == 200, (machine.name, status, body)
        apiservers[machine.name] = json.loads(body)["gitVersion"]
        for unit in (CONTROLLER_MANAGER_UNIT, SCHEDULER_UNIT):
            binary = machine.unit(unit).exec_start[0]
            version = cluster.network.run(host, [binary, "--version"], timeout=30).stdout.split()[-1]
            peer = machine.name if _kubeconfig_server(machine, unit) in LOOPBACK else None
            components[f"{machine.name}/{unit.removesuffix('.service')}"] = (version, peer)
    kubelets = cluster.kubectl(
        "get", "nodes", "-o", "jsonpath={.items[*].status.nodeInfo.kubeletVersion}", timeout=60
    ).stdout.split()
    return {"apiservers": apiservers, "components": components, "kubelets": dict(Counter(kubelets))}


def _not_ready_nodes(cluster: Cluster) -> list[str]:
    nodes = cluster.get_json("nodes")["items"]
    return [
        n["metadata"]["name"]
        for n in nodes
        if not any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))
    ]


def _check(cluster: Cluster, load: BackgroundLoad, outputs: dict, versions: dict, on_model: set[str]) -> None:
    """What holds after every upgraded instance and every deploy: the skew rules; the program's record of the
    scale set's model is the release each instance ``on_model`` answers with; nodes get the new release only
    once every instance runs it; every node still Ready (no Lease lapsed); nothing acknowledged lost."""
    violations = skew_violations(versions["apiservers"], versions["components"], list(versions["kubelets"]))
    assert not violations, violations
    rollout = outputs[ROLLOUT_OUTPUT]
    assert not rollout["machines"][APISERVER_ROLE], rollout["machines"]  # no apiserver VM: the scale set's instances
    model = rollout[APISERVER_SCALE_SET_RECORD]["kubernetesVersion"]
    answers = {name: v.removeprefix("v") for name, v in versions["apiservers"].items() if name in on_model}
    assert set(answers.values()) <= {model}, (model, versions["apiservers"], sorted(on_model))
    running = [minor(v) for v in versions["apiservers"].values()]
    assert minor(rollout["nodeKubernetesVersion"]) <= min(running), (rollout["nodeKubernetesVersion"], running)
    assert not _not_ready_nodes(cluster)
    assert_nothing_lost(load)


def test_upgrade_under_load_apiservers_rolled_then_nodes_then_nat_hosts(
    binaries: Path, new_image: Path, tmp_path_factory: pytest.TempPathFactory
):
    workdir = tmp_path_factory.mktemp("upgrade")
    release = subprocess.run(
        [new_image / "kube-apiserver", "--version"], capture_output=True, text=True, timeout=30
    ).stdout.split()[-1]
    report: dict = {"fleet_nodes": FLEET_NODES, "writes_per_s": WRITES_PER_S, "to": release}
    cluster = boot("prod", workdir / "box", binaries, with_nodes=False)
    planner = ThreadPoolExecutor(max_workers=1)
    try:
        report["from"] = running = cluster.spec.config.kubernetes_version
        assert minor(release) == minor(running) + 1, (running, release)
        overrides = [f"kubernetesVersion={release.removeprefix('v')}", f"machineImageVersion={NEW_IMAGE_VERSION}"]
        scale_set = ApiserverScaleSet(cluster)  # every instance created from the model, never rolled
        state = scale_set.write_state(cluster.plan, workdir / "rollout-0.json")
        first = planner.submit(
            plan_stack, cluster.stack, workdir / "deploy-1", overrides, cluster.plan.directory, state
        )
        load = start_load(cluster, binaries / "fleet", workdir, FLEET_NODES, WRITES_PER_S, WRITER_WORKERS)
        _upgrade(cluster, scale_set, load, new_image, overrides, first, planner, workdir, report)
        apiservers = running_versions(cluster)["apiservers"]
        assert set(apiservers.values()) == {release}, apiservers
    finally:
        planner.shutdown(cancel_futures=True)
        cluster.close()
        path = Path(os.environ.get("UPGRADE_REPORT", workdir / "upgrade.json"))
        path.write_text(json.dumps(report, indent=2))
        print(f"\nupgrade figures ({path}):\n{json.dumps(report, indent=2)}")


def _upgrade(
    cluster: Cluster,
    scale_set: ApiserverScaleSet,
    load: BackgroundLoad,
    new_image: Path,
    overrides: list[str],
    planned: Future,
    planner: ThreadPoolExecutor,
    workdir: Path,
    report: dict,
) -> None:
    before = running_versions(cluster)
    assert not skew_violations(before["apiservers"], before["components"], list(before["kubelets"])), before
    previous = cluster.plan
    node_release = load_plan(previous.directory).outputs[ROLLOUT_OUTPUT]["nodeKubernetesVersion"]
    for deploy in range(1, MAX_DEPLOYS + 1):
        plan = planned.result(timeout=600)
        diff = diff_plans(load_plan(previous.directory), load_plan(plan.directory))
        replaced = sorted(c.name for c in diff.resources if c.type == VM_TYPE and c.action == "replace")
        rolls = model_changed(previous, plan)
        if not replaced and not rolls:  # the upgrade is done: this deploy moves no machine
            report["last_deploy_changes"] = [c.name for c in diff.resources]
            break
        assert not [m for m, _, _ in cluster.control_plane if m.resource in replaced], replaced
        steady(load, report)
        started = time.time()
        step: dict = {"replaces": replaced, "apiserver_model_changed": rolls}
        cluster.plan = plan
        apply_objects(cluster)  # in the deploy; the scale set's rolling upgrade runs after it returns
        if rolls:
            step["instances"], held = _roll(
                cluster, scale_set, plan, load, new_image, overrides, planner, workdir, report
            )
            # A deploy planned while Azure still rolled the model leaves the nodes where they are, and moves nothing.
            held_plan = load_plan(held.result(timeout=600).directory)
            assert not diff_plans(load_plan(plan.directory), held_plan).changed, "a deploy mid-rollout moved something"
            assert held_plan.outputs[ROLLOUT_OUTPUT]["nodeKubernetesVersion"] == node_release
        time.sleep(QUIET_S)
        ended = time.time()
        step |= {
            "seconds": round(ended - started, 1),
            "writer": load.window(started, ended),
            "leases": load.leases(started, ended),
            "versions": running_versions(cluster),
        }
        record(report, f"deploy_{deploy}", step)
        if not rolls:  # replaces nothing here (NAT hosts are not in the box): costs nothing, as losing events etcd
            baseline = report["baseline"][-1]["writer"]["create"]["p99_s"] or 0
            assert step["writer"]["create"]["errors"] == step["writer"]["get"]["errors"] == 0, step["writer"]
            assert step["leases"]["errors"] == 0, step["leases"]
            assert step["writer"]["create"]["p99_s"] <= max(SLO_MUTATING_S, 2 * baseline), step["writer"]
        state = scale_set.state(plan)
        step["rollout_state"] = state
        _check(cluster, load, load_plan(plan.directory).outputs, step["versions"], scale_set.on_model(plan))
        state_file = scale_set.write_state(plan, workdir / f"rollout-{deploy}.json")
        out = workdir / f"deploy-{deploy + 1}"
        planned = planner.submit(plan_stack, cluster.stack, out, overrides, plan.directory, state_file)
        previous = plan
    else:
        pytest.fail(f"the upgrade still moved machines after {MAX_DEPLOYS} deploys")
    report["deploys"] = deploy - 1
    report["acknowledged_writes"] = len(load.acknowledged())
    assert load_plan(previous.directory).outputs[ROLLOUT_OUTPUT]["nodeKubernetesVersion"] == overrides[0].split("=")[1]


def _roll(
    cluster: Cluster,
    scale_set: ApiserverScaleSet,
    plan: Plan,
    load: BackgroundLoad,
    new_image: Path,
    overrides: list[str],
    planner: ThreadPoolExecutor,
    workdir: Path,
    report: dict,
) -> tuple[list[dict], Future]:
    """The scale set's rolling upgrade, checked after each instance: its budget (out of the load balancer, leases
    moved, no write failing once it is out, none once it is back), the skew rules, the record. After the first,
    a deploy is planned with where the box stands (the gate's input), to be checked once it is done."""
    instances: list[dict] = []
    held: list[Future] = []

    def after_instance(moved: ApiserverReplaced) -> None:
        time.sleep(QUIET_S)
        now = time.time()
        state = scale_set.state(plan)
        moved.figures |= {
            "window_s": round(now - moved.lost_at, 1),
            "writer_window": load.window(moved.lost_at, now),
            "leases_window": load.leases(moved.lost_at, now),
            "latestModelApplied": state["latestModelApplied"],
        }
        instances.append(moved.figures)
        print(f"\n{moved.figures['victim']} upgraded: {json.dumps(moved.figures)}", flush=True)
        moved.assert_within_budget()
        # A new instance taken in by the load balancer costs no request.
        assert not load.failed(moved.back_at, now), load.failed(moved.back_at, now)[:5]
        _check(cluster, load, load_plan(plan.directory).outputs, running_versions(cluster), scale_set.on_model(plan))
        if not held:
            state_file = scale_set.write_state(plan, workdir / f"rollout-{plan.directory.name}-midway.json")
            out = workdir / f"{plan.directory.name}-midway"
            held.append(planner.submit(plan_stack, cluster.stack, out, overrides, plan.directory, state_file))

    scale_set.roll(plan, new_image, load, lambda: steady(load, report), after_instance)
    return instances, held[0]
