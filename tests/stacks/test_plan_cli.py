"""The offline plan: exit codes, files written, and one clear line for every kind of bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from plan.__main__ import main
from plan.stackfile import PROJECT_DIR
from tests.helpers import raw_stack

# The second stage of scripts/test.sh (tens of seconds): the plan CLI run as a process, plans written to disk.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def written_plans(tmp_path_factory):
    """``{stack: (plan directory, printed summary)}``, each plan written once for the session."""
    import contextlib
    import io

    plans = {}
    for stack in ("dev", "prod"):
        out = tmp_path_factory.mktemp("plans") / stack
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            assert main(["--stack", stack, "--out", str(out)]) == 0
        plans[stack] = (out, printed.getvalue())
    return plans


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_plan_writes_every_artifact(stack, written_plans):
    out, _ = written_plans[stack]
    resources = json.loads((out / "resources.json").read_text())
    assert resources, "no resources registered"
    first = resources[0]
    assert set(first) == {"urn", "id", "type", "name", "parent", "inputs", "options", "dependencies"}
    assert set(first["options"]) == {
        "protect",
        "ignoreChanges",
        "dependsOn",
        "deleteBeforeReplace",
        "retainOnDelete",
        "replaceOnChanges",
        "aliases",
        "version",
        "additionalSecretOutputs",
    }
    assert json.loads((out / "outputs.json").read_text())["cluster"]["clusterName"] == stack
    summary = (out / "summary.md").read_text()
    assert "## Resources by type" in summary and "## IP budget" in summary


def test_prod_summary_shows_7500_nodes(written_plans):
    out, printed = written_plans["prod"]
    assert printed.startswith((out / "summary.md").read_text())
    assert "**Node capacity: 7,500 nodes**" in printed
    assert "| **peered group** |" in printed


DEV_POOLS = len(raw_stack("dev")["nodePools"])  # --config may set an index up to this one (an append)

BAD_INPUTS = {
    "wrong type": (["controlPlane.apiservers=three"], "controlPlane.apiservers = 'three'", "a whole number"),
    "zero count": (["network.natHosts.count=0"], "network.natHosts.count = 0", "a whole number from 1 to 16"),
    "negative count": (["nodePools[0].minNodes=-1"], "nodePools[0].minNodes = -1", "a whole number >= 0"),
    "even etcd members": (["etcd.members=4"], "etcd.members = 4", "an odd number of members"),
    "min above max": (["nodePools[1].minNodes=9"], "nodePools[1].minNodes = 9", "at most maxNodes (3)"),
    "hub overlaps cluster": (
        ["network.hub.addressSpace=10.64.0.0/24"],
        "network.hub.addressSpace",
        "does not overlap network.addressSpace",
    ),
    "service range inside VNets": (
        ["network.serviceCidr=10.100.0.0/16"],
        "network.serviceCidr",
        "a range outside network.addressSpace",
    ),
    "bad pool name": (["nodePools[0].name=GPU_Pool"], "nodePools[0].name = 'GPU_Pool'", "lowercase letters or digits"),
    "unknown key": (["etcd.quota=1"], "etcd.quota = 1", "unknown key"),
    "unknown top-level key": (["nodepools=[]"], "supercluster:nodepools", "unknown key"),
    "IP budget over the VNet limit": (
        ["network.maxPrivateIpsPerVnet=1000", "nodePools[1].maxNodes=100"],
        "nodePools[1].maxNodes = 100",
        "use podIpsPerNode <= 8",
    ),
    "IP budget over the peered group": (
        ["network.maxPrivateIpsPerPeeredGroup=1400", "nodePools[1].maxNodes=20"],
        "network.maxPrivateIpsPerPeeredGroup = 1400",
        "need 1,595 private IPs (including the hub's 1,024), 195 too many; "
        "any one of these fits: cpu podIpsPerNode <= 6 or maxNodes <= 8",
    ),
    "pool outgrows its address block": (
        ["nodePools[1].maxNodes=5000"],
        "nodePools[1].maxNodes = 5000",
        "at most 2000 nodes",
    ),
    "etcd on a network disk": (
        ["etcd.vmSize=Standard_D4s_v5"],
        "etcd.vmSize = 'Standard_D4s_v5'",
        "local temp or NVMe SSD",
    ),
    "bad override path": (["nodePools[9].maxNodes=3"], "--config", f"an index from 0 to {DEV_POOLS}"),
}


@pytest.mark.parametrize("overrides,key,accepted", BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_input_stops_with_one_line(overrides, key, accepted, tmp_path, capsys):
    out = tmp_path / "plan"
    args = ["--stack", "dev", "--out", str(out)]
    for override in overrides:
        args += ["--config", override]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("error: invalid config ")
    assert key in err and accepted in err, err
    assert not out.exists(), "a failed plan must not leave a plan directory"


def test_cli_process_exit_code_and_no_traceback():
    result = subprocess.run(
        [sys.executable, "-m", "plan", "--stack", "dev", "--config", "etcd.members=2"],
        cwd=PROJECT_DIR,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "supercluster:etcd.members = 2" in result.stderr


def test_unknown_stack_is_a_clear_error(capsys):
    assert main(["--stack", "nope"]) == 2
    assert "one of the stacks with a Pulumi.<stack>.yaml: dev, prod" in capsys.readouterr().err


def test_a_plan_that_would_leak_a_secret_is_not_kept(tmp_path, capsys, monkeypatch):
    import plan.__main__ as cli

    real_files = cli.plan_files

    def leaky(*args):
        return {**real_files(*args), "files/leak.pem": "-----BEGIN PRIVATE KEY-----\nx\n"}

    monkeypatch.setattr(cli, "plan_files", leaky)
    out = tmp_path / "plan"
    assert main(["--stack", "dev", "--out", str(out)]) == 3
    assert "secret in plan output: private key in files/leak.pem:1" in capsys.readouterr().err
    assert not out.exists()


def test_another_process_writes_the_same_plan_byte_for_byte(written_plans, tmp_path):
    """Reviewers diff plan directories as text: key order must not depend on the process."""
    import filecmp

    out, _ = written_plans["dev"]
    again = tmp_path / "again"
    result = subprocess.run(
        [sys.executable, "-m", "plan", "--stack", "dev", "--out", str(again)],
        cwd=PROJECT_DIR,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": "7"},
    )
    assert result.returncode == 0, result.stderr
    mismatches = []

    def compare(a, b):
        comparison = filecmp.dircmp(a, b)
        mismatches.extend(comparison.left_only + comparison.right_only)
        _, differ, errors = filecmp.cmpfiles(a, b, comparison.common_files, shallow=False)
        mismatches.extend(differ + errors)
        for sub in comparison.common_dirs:
            compare(a / sub, b / sub)

    compare(out, again)
    assert mismatches == []
