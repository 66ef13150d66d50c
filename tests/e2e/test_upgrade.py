"""The program's staged Kubernetes upgrade, applied to prod's control plane in the box deploy by deploy, under load.

Each deploy is the program's own: ``python -m plan --stack prod`` at the next minor (the release
scripts/build-upgrade-binaries.sh builds) with a new machine image, planned against the deploy before,
whose outputs it reads as its last deploy's (the ``rollout`` record it stages from), as ``pulumi up``
reads the stack's. Its plan diff names the machines it replaces; in the box exactly those are replaced:
the old VM lost (Pulumi deletes it first: its name and address are fixed; the harness gives it no clean
shutdown, the worst case), then a new VM on its address with that deploy's rendered files and the new
release's binaries (the new machine image). Then the deploy's in-cluster objects are applied.

The fault suite's background load runs throughout (tests/e2e/faults.py: the simulated fleet renewing its
Leases, the writer creating ConfigMaps through the load balancer). After each deploy the test checks the
version-skew rules on what the box runs and that the program's record says what the box runs, and that
nothing acknowledged is lost. Marked ``faults``: run by the command in docs/reliability.md, not in CI.
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
from infra.day2.deploy_rules import APISERVER_ROLE, ROLLOUT_OUTPUT
from plan.diff import VM_TYPE, diff_plans, load_plan
from tests.e2e.cluster import Cluster, apply_objects, boot, plan_stack
from tests.e2e.faults import (
    FLEET_NODES,
    QUIET_S,
    SCHEDULER_CONFIG,
    SLO_MUTATING_S,
    WRITER_WORKERS,
    WRITES_PER_S,
    BackgroundLoad,
    assert_nothing_lost,
    lose_and_replace_apiserver,
    record,
    start_load,
    steady,
)
from tests.e2e.plan_machines import Machine
from tests.e2e.version_skew import minor, skew_violations
from tests.helpers import built_folder

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

# A new release's binaries come in a new machine image: the program refuses a reused version (docs/day2.md).
NEW_IMAGE_VERSION = "1.1.0"
# prod's rollout: an apiserver per deploy, then the node models with NAT host 0, then a NAT host per deploy,
# then the deploy that moves nothing. A few more before the test gives up on a rollout that never ends.
MAX_DEPLOYS = 12
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


def _check_deploy(cluster: Cluster, load: BackgroundLoad, outputs: dict, versions: dict) -> None:
    """What holds after every deploy: the skew rules, the program's record is what the box runs, every node
    still Ready (no Lease lapsed), nothing acknowledged lost."""
    violations = skew_violations(versions["apiservers"], versions["components"], list(versions["kubelets"]))
    assert not violations, violations
    recorded = [m["kubernetesVersion"] for m in outputs[ROLLOUT_OUTPUT]["machines"][APISERVER_ROLE]]
    in_box = [v.removeprefix("v") for _, v in sorted(versions["apiservers"].items())]
    assert recorded == in_box, (recorded, versions["apiservers"])
    # The program gives nodes the new release only once its record has every apiserver on it.
    node_release = outputs[ROLLOUT_OUTPUT]["nodeKubernetesVersion"]
    assert minor(node_release) <= min(minor(v) for v in recorded), (node_release, recorded)
    assert not _not_ready_nodes(cluster)
    assert_nothing_lost(load)


def test_staged_upgrade_one_machine_per_deploy_under_load(
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
        # The program's deploys, each planned against the one before: a plan reads the program's own outputs,
        # nothing from the box, so the chain is planned (one at a time) while the load starts.
        overrides = [f"kubernetesVersion={release.removeprefix('v')}", f"machineImageVersion={NEW_IMAGE_VERSION}"]
        plans, previous = [], cluster.plan.directory
        for deploy in range(1, MAX_DEPLOYS + 1):
            out = workdir / f"deploy-{deploy}"
            plans.append(planner.submit(plan_stack, cluster.stack, out, overrides, previous))
            previous = out
        load = start_load(cluster, binaries / "fleet", workdir, FLEET_NODES, WRITES_PER_S, WRITER_WORKERS)
        _upgrade(cluster, load, new_image, release, plans, report)
    finally:
        planner.shutdown(cancel_futures=True)
        cluster.close()
        path = Path(os.environ.get("UPGRADE_REPORT", workdir / "upgrade.json"))
        path.write_text(json.dumps(report, indent=2))
        print(f"\nstaged upgrade figures ({path}):\n{json.dumps(report, indent=2)}")


def _upgrade(
    cluster: Cluster, load: BackgroundLoad, new_image: Path, release: str, plans: list[Future], report: dict
) -> None:
    before = running_versions(cluster)
    assert not skew_violations(before["apiservers"], before["components"], list(before["kubelets"])), before
    previous = cluster.plan.directory
    for deploy, planned in enumerate(plans, 1):
        plan = planned.result(timeout=600)
        out = plan.directory
        diff = diff_plans(load_plan(previous), load_plan(out))
        replaced = sorted(c.name for c in diff.resources if c.type == VM_TYPE and c.action == "replace")
        if not replaced:  # the rollout is done: this deploy moves no machine
            break
        new_machines = {m.resource: m for m in plan.vms()}
        in_box = [i for i, (m, _, _) in enumerate(cluster.control_plane) if m.resource in replaced]
        steady(load, report)
        started = time.time()
        step: dict = {"replaces": replaced}
        for index in in_box:
            machine = new_machines[cluster.control_plane[index][0].resource]
            moved = lose_and_replace_apiserver(cluster, load, index, machine, new_image)
            step["apiserver"] = moved.figures
            moved.assert_within_budget()
            joined_at = moved.back_at
        cluster.plan = plan
        apply_objects(cluster)
        time.sleep(QUIET_S)
        ended = time.time()
        step |= {
            "seconds": round(ended - started, 1),
            "writer": load.window(started, ended),
            "leases": load.leases(started, ended),
            "versions": running_versions(cluster),
        }
        record(report, f"deploy_{deploy}", step)
        if in_box:  # a new apiserver taken in by the load balancer costs no request
            assert not load.failed(joined_at, ended), load.failed(joined_at, ended)[:5]
        else:  # a deploy that replaces nothing here (its objects applied) costs nothing, as in the events scenario
            baseline = report["baseline"][-1]["writer"]["create"]["p99_s"] or 0
            assert step["writer"]["create"]["errors"] == step["writer"]["get"]["errors"] == 0, step["writer"]
            assert step["leases"]["errors"] == 0, step["leases"]
            assert step["writer"]["create"]["p99_s"] <= max(SLO_MUTATING_S, 2 * baseline), step["writer"]
        _check_deploy(cluster, load, load_plan(out).outputs, step["versions"])
        previous = out
    else:
        pytest.fail(f"the rollout still moved machines after {MAX_DEPLOYS} deploys")
    report["deploys"] = deploy - 1
    report["acknowledged_writes"] = len(load.acknowledged())
    apiservers = running_versions(cluster)["apiservers"]
    assert set(apiservers.values()) == {release}, apiservers
    assert load_plan(previous).outputs[ROLLOUT_OUTPUT]["nodeKubernetesVersion"] == release.removeprefix("v")
