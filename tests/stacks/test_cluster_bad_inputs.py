"""Inputs that plan a cluster that cannot work, or that the CLI must not act on, end to end through the
real entry point (issue 28): each exits 2 with one line naming the key, the value and what would work,
no traceback, and the folder it runs in is left exactly as it was: nothing written, nothing deleted.

Categories: the CLI's own paths (``--out``, ``--diff``, ``--stack-outputs``); the last deploy's outputs;
strict inputs (ASCII, etcd's quota); the cluster as a whole (``infra/cluster/whole_cluster.py``). Every case runs
``python -m plan`` in its own process, in a folder holding a user's file and an earlier plan.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from plan.__main__ import EXIT_OK, main
from plan.runner import own_stack_name
from plan.stackfile import PROJECT_DIR
from tests.helpers import load_yaml

# The second stage of scripts/test.sh (about a minute): one plan CLI process per case.
pytestmark = pytest.mark.slow

OWN = own_stack_name("dev")


@pytest.fixture(scope="module")
def dev_plan_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("plans") / "dev"
    assert main(["--stack", "dev", "--out", str(out)]) == EXIT_OK
    return out


def outputs_of(plan: Path) -> dict:
    return json.loads((plan / "outputs.json").read_text())


def with_outputs(change: Callable[[dict], object]) -> Callable[[Path, Path], list[str]]:
    """A case whose earlier plan (``--diff``) has outputs changed by ``change`` (which edits them in place or
    returns new ones)."""

    def setup(folder: Path, plan: Path) -> list[str]:
        outputs = outputs_of(plan)
        changed = change(outputs)
        (plan / "outputs.json").write_text(json.dumps(outputs if changed is None else changed))
        return ["--diff", str(plan)]

    return setup


def stack_outputs(document: object) -> Callable[[Path, Path], list[str]]:
    def setup(folder: Path, plan: Path) -> list[str]:
        (folder / "outputs.json").write_text(json.dumps(document))
        return ["--stack-outputs", str(folder / "outputs.json")]

    return setup


def own_outputs(change: Callable[[dict], object]) -> Callable[[Path, Path], list[str]]:
    """``--stack-outputs`` giving this stack's own outputs (the earlier plan's), changed by ``change``."""

    def setup(folder: Path, plan: Path) -> list[str]:
        outputs = outputs_of(plan)
        changed = change(outputs)
        return stack_outputs({OWN: outputs if changed is None else changed})(folder, plan)

    return setup


def config(*overrides: str) -> Callable[[Path, Path], list[str]]:
    def setup(folder: Path, plan: Path) -> list[str]:
        return [arg for override in overrides for arg in ("--config", override)]

    return setup


def out(path: Callable[[Path, Path], Path]) -> Callable[[Path, Path], list[str]]:
    def setup(folder: Path, plan: Path) -> list[str]:
        return ["--out", str(path(folder, plan))]

    return setup


def symlink_to_plan(folder: Path, plan: Path) -> Path:
    (folder / "link").symlink_to(plan)
    return folder / "link"


def plan_without_resources(folder: Path, plan: Path) -> list[str]:
    (plan / "resources.json").write_text('{"not": "a list"}')
    return ["--diff", str(plan)]


AUTOSCALER_OFF = ("addons.balloons.enabled=false", "addons.clusterAutoscaler.enabled=false")


def TEAM_TAINT(effect: str, pool: int = 1) -> tuple[str, ...]:  # noqa: N802 - reads as a constant in CASES
    """A team taint on a pool (by default dev's only CPU pool)."""
    prefix = f"nodePools[{pool}].taints[0]"
    return (f"{prefix}.key=team", f"{prefix}.value=research", f"{prefix}.effect={effect}")


def set_path(document: dict, path: str, value: object) -> None:
    *parents, last = path.split(".")
    for key in parents:
        document = document[key]
    document[last] = value


# name: (what the case adds to the command, text the one line must contain)
CASES: dict[str, tuple[Callable[[Path, Path], list[str]], str]] = {
    # The CLI never deletes what it did not write.
    "--out is the working folder": (out(lambda folder, plan: folder), "--out = "),
    "--out is a user's folder": (out(lambda folder, plan: folder / "mine"), "folder holding a plan this program"),
    "--out is a file": (out(lambda folder, plan: folder / "mine" / "notes.txt"), "notes.txt"),
    "--out is a link to a plan": (out(symlink_to_plan), "left as it is"),
    "--out under a file": (out(lambda folder, plan: folder / "mine" / "notes.txt" / "plan"), "is not a folder"),
    # Every input folder is validated and nothing hangs.
    "--diff outputs.json a list": (with_outputs(lambda outputs: []), "outputs.json is list"),
    "--diff outputs.json a string": (with_outputs(lambda outputs: "x"), "outputs.json is str"),
    "--diff resources.json not a list": (plan_without_resources, "resources.json is not a list"),
    "--diff is a user's folder": (lambda folder, plan: ["--diff", str(folder / "mine")], "is not a plan directory"),
    # The last deploy's outputs, validated against the outputs contract and what the program exports.
    "--diff outputs empty": (with_outputs(lambda outputs: {}), "leave them out for a first deploy"),
    "--diff cluster masked": (with_outputs(lambda o: set_path(o, "cluster", "[secret]")), "cluster = '[secret]'"),
    "--diff cluster name masked": (
        with_outputs(lambda o: set_path(o, "cluster.clusterName", "[secret]")),
        "cluster.clusterName = '[secret]': expected the value itself",
    ),
    "--diff cluster a number": (with_outputs(lambda o: set_path(o, "cluster", 3)), "cluster = 3"),
    "--diff contract of another major": (
        with_outputs(lambda o: set_path(o, "cluster.schemaVersion", "3.0")),
        "contract 3.0 is newer than this reader",
    ),
    "--diff pools mistyped": (
        with_outputs(lambda o: set_path(o, "cluster.nodePools", ["cpu"])),
        "cluster.nodePools: expected a non-empty object",
    ),
    "--diff rollout mistyped": (
        with_outputs(lambda o: set_path(o, "rollout.machines", "apiserver")),
        "rollout.machines = 'apiserver'",
    ),
    "--diff etcd URLs mistyped": (
        with_outputs(lambda o: set_path(o, "etcdClientUrls", "https://10.64.0.4:2379")),
        "etcdClientUrls = 'https://10.64.0.4:2379': expected a non-empty list",
    ),
    "--diff another stack's outputs": (
        with_outputs(lambda o: {"registryLoginServer": o["registryLoginServer"]}),
        "with a `cluster` output",
    ),
    "--stack-outputs under another stack name": (
        stack_outputs({"acme/supercluster/dev": {}}),
        "--stack-outputs = 'acme/supercluster/dev': expected outputs of a stack this program reads",
    ),
    "--stack-outputs own masked": (
        own_outputs(lambda o: {**o, "cluster": "[secret]"}),
        "cluster = '[secret]'",
    ),
    "--stack-outputs own mistyped version": (
        own_outputs(lambda o: set_path(o, "rollout.nodeKubernetesVersion", 1.33)),
        "rollout.nodeKubernetesVersion = 1.33",
    ),
    "--stack-outputs own not an object": (
        stack_outputs({OWN: ["cluster"]}),
        "a readable YAML/JSON file mapping org/project/stack names to their outputs",
    ),
    # Strict inputs where Azure and Kubernetes are strict: ASCII digits, etcd's quota above its default.
    "version with an Arabic-Indic digit": (
        config("kubernetesVersion=1.33.\u0664"),
        "kubernetesVersion = '1.33.\u0664'",
    ),
    "image version with a Devanagari digit": (config("machineImageVersion=1.0.\u0967"), "machineImageVersion"),
    "count with a fullwidth digit": (config("nodePools[1].maxNodes=\uff13"), "nodePools[1].maxNodes"),
    "etcd quota at etcd's default": (config("etcd.quotaBackendBytes=2147483648"), "from 2147483649"),
    # A production cluster's alerts page someone (issue 27).
    "production with no receiver": (
        config("production=true"),
        "addons.monitoring.receivers = []: expected at least one receiver: production is true",
    ),
    "events etcd quota at etcd's default": (
        config("eventsEtcd.quotaBackendBytes=2147483648"),
        "eventsEtcd.quotaBackendBytes",
    ),
    # The cluster as a whole (infra/cluster/whole_cluster.py): valid values that together cannot work.
    "only CPU pool reserved for a team": (config(*TEAM_TAINT("NoSchedule")), "addons.coredns = 'Deployment"),
    "only CPU pool evicts system pods": (config(*TEAM_TAINT("NoExecute")), "taint team=research:NoExecute"),
    "Prometheus bigger than a CPU node": (config("addons.monitoring.memoryGiB=64"), "left of allocatable"),
    "GPU pools without the device plugin": (
        config("addons.nvidiaDevicePlugin.enabled=false"),
        "a DaemonSet providing resource:nvidia.com/gpu",
    ),
    "InfiniBand pools without the RDMA plugin": (
        config("addons.rdmaDevicePlugin.enabled=false"),
        "a DaemonSet providing resource:rdma/ib",
    ),
    "no cluster DNS": (
        config("addons.coredns.enabled=false", "addons.nodeLocalDns.enabled=false"),
        "working cluster DNS at kubelet's clusterDNS",
    ),
    "GPU capacity that never arrives": (config(*AUTOSCALER_OFF), "nodePools[0].minNodes = 0"),
    "part of a pool that never arrives": (
        config(*AUTOSCALER_OFF, "nodePools[0].minNodes=1"),
        "expected 2 (its maxNodes)",
    ),
    "prod capacity that never arrives": (
        lambda folder, plan: ["--stack", "prod", *config(*AUTOSCALER_OFF)(folder, plan)],
        "nodePools[0].minNodes = 0: expected 3000 (its maxNodes)",
    ),
    "duplicate taint key and effect": (
        config(
            "nodePools[0].taints[1].key=nvidia.com/gpu",
            "nodePools[0].taints[1].value=x",
            "nodePools[0].taints[1].effect=NoSchedule",
        ),
        "expected each key and effect once",
    ),
    "provision timeout shorter than a GPU join": (
        config("addons.clusterAutoscaler.maxNodeProvisionTime=5m"),
        "expected more than pool gpu's join time",
    ),
    "fewer pod IPs than GPUs": (config("nodePools[0].podIpsPerNode=9"), "nodePools[0].podIpsPerNode = 9"),
    "prod team pool evicts everything": (
        lambda folder, plan: ["--stack", "prod", *config(*TEAM_TAINT("NoExecute", pool=2))(folder, plan)],
        "addons.coredns = 'Deployment",
    ),
    "prod with everything as address space": (
        lambda folder, plan: ["--stack", "prod", "--config", "network.addressSpace=0.0.0.0/0"],
        "network.addressSpace = '0.0.0.0/0'",
    ),
}


def snapshot(folder: Path) -> dict[str, str]:
    """Every path under ``folder`` with its content's digest (links by their target): what a case may not change."""
    seen = {}
    for root, dirs, names in os.walk(folder):
        for name in dirs + names:
            path = Path(root, name)
            if path.is_symlink():
                seen[str(path)] = "-> " + os.readlink(path)
            elif path.is_file():
                seen[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                seen[str(path)] = "dir"
    return seen


@pytest.mark.parametrize("name", CASES)
def test_bad_input_exits_2_in_one_line_and_touches_nothing(name, tmp_path, dev_plan_dir):
    setup, expected = CASES[name]
    folder = tmp_path / "work"
    (folder / "mine").mkdir(parents=True)
    (folder / "mine" / "notes.txt").write_text("a user's file\n")
    plan = folder / "earlier-plan"
    shutil.copytree(dev_plan_dir, plan, symlinks=True)
    args = setup(folder, plan)
    if "--out" not in args:
        args += ["--out", str(folder / "new-plan")]
    before = snapshot(folder)
    result = subprocess.run(
        [sys.executable, "-m", "plan", "--stack", "dev", *args],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": str(PROJECT_DIR)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    assert expected in result.stderr, result.stderr
    assert snapshot(folder) == before, "a refused run must write nothing and delete nothing"


def test_the_valid_neighbours_pass(tmp_path, dev_plan_dir):
    """An earlier plan is replaced by --out, its outputs read by --diff, and this stack's own outputs given
    with --stack-outputs."""
    plan = tmp_path / "plan"
    shutil.copytree(dev_plan_dir, plan, symlinks=True)
    (plan / "stale.txt").write_text("left by an earlier plan\n")
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({OWN: outputs_of(dev_plan_dir)}))
    code = main(["--stack", "dev", "--out", str(plan), "--diff", str(dev_plan_dir), "--stack-outputs", str(outputs)])
    assert code in (0, 1)
    assert not (plan / "stale.txt").exists(), "a plan folder this program wrote is replaced as a whole"
    assert (
        outputs_of(plan)["cluster"]["schemaVersion"] == "2.0" and "adminKubeconfig" not in outputs_of(plan)["cluster"]
    )


def test_the_deploy_that_moves_a_stack_to_contract_2_reads_the_1_0_outputs_its_last_deploy_wrote(
    tmp_path, dev_plan_dir
):
    """The release before 2.0 exported ``adminKubeconfig`` (masked in a plan, the value with --show-secrets):
    the day-2 reader takes that output, as the last deploy's (--stack-outputs) and an earlier plan's (--diff)."""
    last = outputs_of(dev_plan_dir)
    for kubeconfig in ("[secret]", "apiVersion: v1\nkind: Config\n"):
        last["cluster"] = {**last["cluster"], "schemaVersion": "1.0", "adminKubeconfig": kubeconfig}
        outputs = tmp_path / "outputs.json"
        outputs.write_text(json.dumps({OWN: last}))
        code = main(["--stack", "dev", "--out", str(tmp_path / "plan"), "--stack-outputs", str(outputs)])
        assert code in (0, 1)
    last["cluster"]["schemaVersion"] = "0.9"
    outputs.write_text(json.dumps({OWN: last}))
    assert main(["--stack", "dev", "--out", str(tmp_path / "plan2"), "--stack-outputs", str(outputs)]) == 2


def test_there_are_at_least_40_cases_across_the_categories():
    assert len(CASES) >= 40
    assert sum(1 for name in CASES if name.startswith("--out")) >= 5
    assert sum(1 for name in CASES if name.startswith(("--diff", "--stack-outputs"))) >= 15


def test_a_masked_secret_keeps_its_shape(dev_plan_dir):
    """Each value of a Secret's stringData is masked, its keys kept: the object is still a valid Secret."""
    (secret,) = (dev_plan_dir / "files" / "k8s" / "kube-system").glob("Secret-bootstrap-token-*.yaml")
    document = load_yaml(secret.read_text())
    assert isinstance(document["stringData"], dict) and "token-id" in document["stringData"]
    assert set(document["stringData"].values()) == {"[secret]"}
