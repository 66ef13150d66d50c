"""The NUMA Localhost profile every node carries, applied by the real runc the nodes run (no cluster is
booted): a container under it makes the NUMA calls training needs and is refused the calls that lead off
the container, which the same container without the profile makes, and a call the profile does not list
(``pidfd_getfd``, which no list of refused calls named: the denylist profile before this one let it through).

Substituted: containerd's translation of the profile into the OCI spec. The profile's format is the OCI
runtime spec's seccomp fields (which containerd copies across), so it is written into the bundle's
config.json as is; runc, its libseccomp filter and the kernel are the real thing. The container's root is
this machine's /usr, read-only, in fresh namespaces (its own network namespace, with no interface but lo).
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from infra.node import seccomp

pytestmark = pytest.mark.e2e

# x86_64 system call numbers (arch/x86/entry/syscalls/syscall_64.tbl).
PROBE = r"""
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
def call(nr, *args):
    done = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    return 0 if done >= 0 else ctypes.get_errno()
ring = ctypes.create_string_buffer(120)
node0 = ctypes.c_ulong(1)  # a node mask holding node 0
pidfd = libc.syscall(ctypes.c_long(434), ctypes.c_long(os.getpid()), ctypes.c_long(0))  # pidfd_open(self)
print(json.dumps({
    "set_mempolicy": call(238, 0, 0, 0),  # MPOL_DEFAULT
    "get_mempolicy": call(239, 0, 0, 0, 0, 0),
    "mbind": call(237, 0, 0, 0, 0, 0, 0),  # an empty range
    "move_pages": call(279, 0, 0, 0, 0, 0, 0),  # no pages, this process
    "migrate_pages": call(256, 0, 64, ctypes.addressof(node0), ctypes.addressof(node0)),  # node 0 to node 0
    "pidfd_getfd": call(438, pidfd, 0, 0),  # a copy of its own stdin, through its own pidfd
    "keyctl": call(250, 0, -3, 0),  # KEYCTL_GET_KEYRING_ID of the session keyring
    "unshare": call(272, 0x10000000),  # CLONE_NEWUSER
    "userfaultfd": call(323, 1),  # UFFD_USER_MODE_ONLY
    "io_uring_setup": call(425, 1, ctypes.addressof(ring)),
    "kcmp": call(312, os.getpid(), os.getpid(), 0, 0, 0),  # KCMP_FILE 0 against itself
}))
"""
NUMA = ("set_mempolicy", "get_mempolicy", "mbind", "move_pages", "migrate_pages")
REFUSED = ("keyctl", "unshare", "userfaultfd", "io_uring_setup", "kcmp", "pidfd_getfd")
EPERM = 1


def run_probe(runc: Path, bundle: Path, profile: dict | None) -> dict[str, int]:
    (bundle / "config.json").unlink(missing_ok=True)
    subprocess.run([runc, "spec"], cwd=bundle, check=True, capture_output=True, timeout=30)  # writes config.json
    spec = json.loads((bundle / "config.json").read_text())
    spec["process"].update(terminal=False, args=["/usr/bin/python3", "-c", PROBE])
    spec["root"] = {"path": "rootfs", "readonly": True}
    spec["mounts"].append({"destination": "/usr", "type": "bind", "source": "/usr", "options": ["rbind", "ro"]})
    spec["linux"].pop("seccomp", None)
    if profile is not None:
        spec["linux"]["seccomp"] = profile
    (bundle / "config.json").write_text(json.dumps(spec))
    done = subprocess.run(
        [runc, "run", "--bundle", str(bundle), f"seccomp-{uuid.uuid4().hex[:8]}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    rootfs = tmp_path / "rootfs"
    for folder in ("usr", "proc", "dev", "sys", "tmp"):
        (rootfs / folder).mkdir(parents=True)
    for link in ("bin", "lib", "lib64", "sbin"):  # usr-merged: the loader and libc are under /usr
        (rootfs / link).symlink_to(f"usr/{link}")
    return tmp_path


def test_the_numa_profile_allows_numa_calls_and_refuses_what_leads_off_the_container_or_it_does_not_list(
    binaries: Path, bundle: Path
):
    runc = binaries / "runc"
    unconfined = run_probe(runc, bundle, None)
    confined = run_probe(runc, bundle, seccomp.numa_profile())
    assert {call: confined[call] for call in NUMA} == dict.fromkeys(NUMA, 0)
    assert {call: confined[call] for call in REFUSED} == dict.fromkeys(REFUSED, EPERM)
    # Refused by the profile, not by the container's lack of capabilities: unconfined, the same calls pass.
    assert {call: unconfined[call] for call in REFUSED} == dict.fromkeys(REFUSED, 0), unconfined
