"""Every machine of both plans that runs kubelet puts containers that name no seccomp profile under the
runtime's default, and carries the NUMA Localhost profile in kubelet's seccomp root before kubelet starts.
What the profile lets through and refuses, under the real runc: tests/e2e/test_seccomp_profile.py."""

from __future__ import annotations

import json
import shlex

import pytest
import yaml

from infra.node import kubelet, seccomp, state_disk
from plan.artifacts import cloud_init_files

UNIT_PATH = f"/etc/systemd/system/{seccomp.UNIT}"
KUBELET_UNIT_PATH = f"/etc/systemd/system/{kubelet.UNIT}"


@pytest.fixture(params=["dev", "prod"])
def run(request):
    return request.getfixturevalue(f"{request.param}_plan")


def unit_lines(text: str, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in text.replace("\\\n", " ").splitlines() if line.startswith(f"{key}=")]


def test_every_kubelet_defaults_to_the_runtime_profile_and_has_the_numa_profile_before_it_starts(run):
    checked = 0
    for registration in run.registrations:
        files = cloud_init_files(registration)
        if KUBELET_UNIT_PATH not in files:
            continue
        assert yaml.safe_load(files[kubelet.CONFIG_PATH])["seccompDefault"] is True, registration.name
        (copy,) = unit_lines(files[UNIT_PATH], "ExecStart")
        *_, source, target = shlex.split(copy)
        assert (
            target
            == f"{seccomp.PROFILE_ROOT}/{seccomp.NUMA_PROFILE}"
            == "/var/lib/kubelet/seccomp/supercluster/numa.json"
        )
        assert json.loads(files[source]) == seccomp.numa_profile()
        # After the local SSDs are bind-mounted over /var/lib/kubelet, and kubelet only after the copy.
        assert state_disk.UNIT in unit_lines(files[UNIT_PATH], "After")[0].split()
        assert seccomp.UNIT in unit_lines(files[KUBELET_UNIT_PATH], "Requires")[0].split()
        assert seccomp.UNIT in unit_lines(files[KUBELET_UNIT_PATH], "After")[0].split()
        checked += 1
    assert checked >= 3


def test_the_numa_profile_is_an_allowlist_with_the_numa_calls_and_without_the_escape_calls():
    """Today's design failed here: it allowed by default and refused a list (a call newer than the list passed)."""
    profile = seccomp.numa_profile()
    assert (profile["defaultAction"], profile["defaultErrnoRet"]) == ("SCMP_ACT_ERRNO", seccomp.EPERM)
    rules = profile["syscalls"]
    assert all(r["action"] == "SCMP_ACT_ALLOW" for r in rules if r["names"] != ["clone3"])
    always = {n for r in rules if not r.get("args") and r["action"] == "SCMP_ACT_ALLOW" for n in r["names"]}
    assert set(seccomp.NUMA_SYSCALLS) <= always
    escapes = {
        "unshare",
        "setns",
        "mount",
        "pivot_root",
        "keyctl",
        "add_key",
        "bpf",
        "perf_event_open",
        "init_module",
        "kexec_load",
        "open_by_handle_at",
        "kcmp",
        "userfaultfd",
        "io_uring_setup",
        "pidfd_getfd",
    }
    assert not escapes & {n for r in rules for n in r["names"]}
    # clone: allowed exactly when no namespace flag is set.
    (clone,) = [r["args"] for r in rules if r["names"] == ["clone"]]
    assert clone == [
        {"index": 0, "value": sum(seccomp.CLONE_NAMESPACE_FLAGS.values()), "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}
    ]
