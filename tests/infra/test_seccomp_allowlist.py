"""The NUMA Localhost profile is RuntimeDefault's allowlist plus the NUMA calls: compared with the profile
containerd's own code computes at the release the nodes run (tests/tools/go/seccomp builds its
contrib/seccomp package from the Go module). What the profile does under the real runc:
tests/e2e/test_seccomp_profile.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from infra.catalog import versions
from infra.node import seccomp
from tests.helpers import PROJECT_DIR

TOOL = PROJECT_DIR / "tests" / "tools" / "go" / "seccomp"
ALLOW = "SCMP_ACT_ALLOW"


@pytest.fixture(scope="module")
def runtime_default() -> dict:
    if shutil.which("go") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("the Go toolchain is missing; containerd's profile is computed from its Go module")
        pytest.skip("the Go toolchain is missing")
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly -buildvcs=false"}
    done = subprocess.run(["go", "run", "."], cwd=TOOL, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_tool_builds_the_containerd_release_the_nodes_run():
    (pinned,) = re.findall(r"github.com/containerd/containerd v(\S+)", (TOOL / "go.mod").read_text())
    assert pinned == versions.CONTAINERD_VERSION


def _unconditional(profile: dict) -> set[str]:
    return {n for r in profile["syscalls"] if r["action"] == ALLOW and not r.get("args") for n in r["names"]}


def _conditional(profile: dict) -> list[tuple]:
    """Every rule with arguments or another action, in a comparable form (valueTwo 0 is the default)."""
    return sorted(
        (
            tuple(r["names"]),
            r["action"],
            r.get("errnoRet"),
            tuple((a["index"], a["value"], a.get("valueTwo", 0), a["op"]) for a in r.get("args") or ()),
        )
        for r in profile["syscalls"]
        if r.get("args") or r["action"] != ALLOW
    )


@pytest.mark.slow  # builds containerd's seccomp package (seconds with a warm Go build cache)
def test_the_allowlist_is_containerds_runtime_default_plus_the_numa_calls_without_io_uring(runtime_default):
    ours = seccomp.numa_profile()
    assert set(seccomp.RUNTIME_DEFAULT_ALLOWED) == _unconditional(runtime_default)
    assert set(ours["syscalls"][0]["names"]) == (_unconditional(runtime_default) | set(seccomp.NUMA_SYSCALLS)) - set(
        seccomp.REFUSED_BESIDES
    )
    assert _conditional(ours) == _conditional(runtime_default)
    assert (ours["defaultAction"], ours["architectures"]) == (
        runtime_default["defaultAction"],
        runtime_default["architectures"],
    )
    # The NUMA calls are what RuntimeDefault refuses; io_uring is what it allows and this profile does not.
    assert not set(seccomp.NUMA_SYSCALLS) & _unconditional(runtime_default)
    assert set(seccomp.REFUSED_BESIDES) <= _unconditional(runtime_default)
