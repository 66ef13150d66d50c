"""Seccomp on every node: no container runs Unconfined unless it asks to.

kubelet's ``seccompDefault`` (GA since Kubernetes 1.27) gives every container that names no profile the
runtime's default, containerd's RuntimeDefault. That profile refuses ``mbind``, ``set_mempolicy`` and
``get_mempolicy`` to a container without ``CAP_SYS_NICE`` (which Pod Security ``baseline`` does not let a
tenant add) and has no ``move_pages``: the calls NUMA-pinned training makes (libnuma, NCCL's and the
data loaders' CPU and memory binding). So one Localhost profile, ``supercluster/numa.json``, is on every
node for the pods that need them (``securityContext.seccompProfile``: ``type: Localhost``,
``localhostProfile: supercluster/numa.json``; ``baseline`` admits it).

The NUMA profile allows by default and refuses, with EPERM, what RuntimeDefault refuses a container with
no added capability that leads off the container or into the kernel: namespaces and mounts, kernel
modules and kexec, keyrings, BPF and perf events, other processes' memory, the clock, swap, reboot,
accounting, handles that bypass the mount namespace, userfaultfd and io_uring (docs.docker.com "Seccomp
security profiles for Docker", its table of significant blocked calls; containerd's default profile has
the same list). What it does not copy is RuntimeDefault's allowlist: a system call newer than the list
below is allowed by it, as it is for a container in ``privileged`` namespaces. It is a profile a pod
opts into; everything else stays under RuntimeDefault.

``/var/lib/kubelet`` is a bind mount from the local SSDs (infra/node/state_disk.py), so the profile is
written under /etc/kubernetes and copied into kubelet's seccomp root on every boot, after the mount and
before kubelet.
"""

from __future__ import annotations

import json
from typing import Any

from infra.boot import systemd
from infra.boot.cloudinit import CloudConfig
from infra.facts.host_paths import KUBELET_ROOT
from infra.node import state_disk

UNIT = "supercluster-seccomp-profiles.service"
# kubelet resolves a Localhost profile under <root-dir>/seccomp (kubernetes.io "Restrict a Container's
# Syscalls with seccomp").
PROFILE_ROOT = f"{KUBELET_ROOT}/seccomp"
NUMA_PROFILE = "supercluster/numa.json"  # what a pod names as localhostProfile
SOURCE_DIR = "/etc/kubernetes/seccomp"

# The NUMA calls RuntimeDefault refuses an unprivileged container, which the profile exists to allow.
NUMA_SYSCALLS = ("mbind", "set_mempolicy", "get_mempolicy", "move_pages", "migrate_pages")
# Refused outright (each is refused by RuntimeDefault to a container with no added capability).
REFUSED = (
    # namespaces, mounts and the root
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    # the kernel itself
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "bpf",
    "perf_event_open",
    "iopl",
    "ioperm",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "syslog",
    "quotactl",
    "quotactl_fd",
    "lookup_dcookie",
    "nfsservctl",
    "uselib",
    "ustat",
    "sysfs",
    "_sysctl",
    "vhangup",
    # keyrings (not namespaced)
    "add_key",
    "request_key",
    "keyctl",
    # the clock
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    # other processes' memory and handles that step around the mount namespace
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "name_to_handle_at",
    "open_by_handle_at",
    # kernel attack surface RuntimeDefault closes
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
)
# clone(2) with any of these flags makes a namespace (linux/sched.h): refused, plain clone allowed.
CLONE_NAMESPACE_FLAGS = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}
EPERM, ENOSYS = 1, 38  # asm-generic/errno-base.h, errno.h


def numa_profile() -> dict[str, Any]:
    """The Localhost profile, in the format kubelet hands containerd (the OCI runtime spec's seccomp fields)."""
    refuse = {"action": "SCMP_ACT_ERRNO", "errnoRet": EPERM}
    return {
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
        "syscalls": [
            {"names": list(REFUSED), **refuse},
            *(
                {
                    "names": ["clone"],
                    **refuse,
                    "args": [{"index": 0, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}],
                }
                for flag in CLONE_NAMESPACE_FLAGS.values()
            ),
            # clone3 passes its flags in memory seccomp cannot read: ENOSYS, so the C library falls back to
            # clone, whose flags the rules above see (as RuntimeDefault does).
            {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS},
        ],
    }


def add_seccomp(cloud: CloudConfig) -> None:
    source = f"{SOURCE_DIR}/{NUMA_PROFILE.rsplit('/', 1)[1]}"
    cloud.add(source, json.dumps(numa_profile(), indent=1) + "\n")
    target = f"{PROFILE_ROOT}/{NUMA_PROFILE}"
    cloud.add(
        f"/etc/systemd/system/{UNIT}",
        systemd.unit(
            "Seccomp profiles into kubelet's seccomp root (on the local SSDs, fresh each boot)",
            ["/usr/bin/install", "-D", "-m", "0644", source, target],
            after=[state_disk.UNIT],
            requires=[state_disk.UNIT],
            service={"Type": "oneshot", "RemainAfterExit": "true", "Restart": "no"},
        ),
    )
