#!/usr/bin/python3
"""supercluster-local-disk: puts a machine's state on its local SSDs, on every boot.

Used by every machine with state on local disks: nodes (containerd's root, kubelet's directory,
pod logs) and etcd members (the data directory). Every local NVMe disk (RAID 0 when there are
several) or else the temp disk becomes one ext4 file system with a fixed label, created only when
missing (Azure hands over blank local disks on a new VM, after deallocation or redeployment), and
mounted; directories listed in ``bind_dirs`` are bind-mounted onto it. Idempotent: a plain reboot
finds the file system by its label and only mounts it.

Usage: supercluster-local-disk SETTINGS.json (written by supercluster: infra/local_disk.py)
Standard library only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

# Runs a command: (argv, must it succeed) -> (exit code, standard output).
Runner = Callable[[Sequence[str], bool], tuple[int, str]]


def log(message: str) -> None:
    print(f"local-disk: {message}", file=sys.stderr, flush=True)


def run(argv: Sequence[str], check: bool = True) -> tuple[int, str]:
    result = subprocess.run(list(argv), capture_output=True, text=True)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {result.stderr.strip()}")
    return result.returncode, result.stdout


def nvme_devices(model_prefix: str, sys_block: str) -> list[str]:
    """Azure's local NVMe disks, by model, never a remote (managed) NVMe disk."""
    found = []
    for entry in sorted(os.listdir(sys_block)):
        if not entry.startswith("nvme"):
            continue
        try:
            with open(os.path.join(sys_block, entry, "device", "model")) as handle:
                model = handle.read().strip()
        except OSError:
            continue
        if model.startswith(model_prefix):
            found.append(f"/dev/{entry}")
    return found


def find_disks(settings: dict, sys_block: str, resource_link: str) -> list[str]:
    if settings["nvme_disks"] > 0:
        return nvme_devices(settings["nvme_model_prefix"], sys_block)
    return [os.path.realpath(resource_link)] if os.path.exists(resource_link) else []


def wait_for_disks(settings: dict, sys_block: str, resource_link: str, sleep: Callable[[float], None]) -> list[str]:
    """udev may still be naming the disks early in boot: wait, bounded, then refuse."""
    want = max(settings["nvme_disks"], 1)
    disks: list[str] = []
    for _ in range(settings["wait_attempts"]):
        disks = find_disks(settings, sys_block, resource_link)
        if len(disks) >= want:
            return disks
        sleep(2)
    raise RuntimeError(f"found {len(disks)} of {want} local disks; refusing to put state on the OS disk")


def mounted_elsewhere(disks: list[str], mount: str, mounts_table: str) -> list[str]:
    """Disks mounted anywhere but ``mount`` (``/proc/self/mounts``): never formatted."""
    busy = []
    for line in mounts_table.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] in disks and fields[1] != mount:
            busy.append(f"{fields[0]} on {fields[1]}")
    return busy


def format_commands(disks: list[str], label: str) -> tuple[list[tuple[tuple[str, ...], bool]], str]:
    """(commands with whether each must succeed, the device to format) for blank disks: RAID 0 over
    several (etcd's op-guide/hardware.md and GCE's kube-up both stripe local SSDs)."""
    if len(disks) == 1:
        return [], disks[0]
    array = f"/dev/md/{label}"
    return [
        # An array from before a reboot is assembled again rather than created over.
        (("mdadm", "--assemble", "--scan"), False),
        (("mdadm", "--create", array, f"--name={label}", "--level=0", f"--raid-devices={len(disks)}",
          "--run", "--force", *disks), True),
    ], array


def setup(settings: dict, *, runner: Runner = run, sys_block: str = "/sys/block",
          resource_link: str = "/dev/disk/azure/resource", by_label: str = "/dev/disk/by-label",
          mounts_file: str = "/proc/self/mounts", sleep: Callable[[float], None] = time.sleep) -> str:
    mount, label = settings["mount"], settings["label"]
    disks = wait_for_disks(settings, sys_block, resource_link, sleep)
    with open(mounts_file) as handle:
        busy = mounted_elsewhere(disks, mount, handle.read())
    if busy:
        raise RuntimeError(f"{', '.join(busy)}: mounted elsewhere; refusing to format it")
    target = os.path.join(by_label, label)
    if not os.path.exists(target):
        commands, device = format_commands(disks, label)
        for argv, check in commands:
            if argv[1] == "--create" and os.path.exists(device):
                continue  # assembled from its superblocks
            runner(argv, check)
        # The label's udev link may not exist yet this early in boot: ask the device itself before
        # formatting anything.
        _, found_label = runner(("blkid", "-s", "LABEL", "-o", "value", device), False)
        if found_label.strip() != label:
            log(f"{disks} hold no file system labelled {label} (new VM, or wiped by Azure): formatting {device}")
            runner(("wipefs", "-a", device), True)
            runner(("mkfs.ext4", "-F", "-q", "-L", label, "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard",
                    device), True)
        runner(("udevadm", "settle"), True)
    os.makedirs(mount, exist_ok=True)
    if runner(("mountpoint", "-q", mount), False)[0] != 0:
        runner(("mount", "-o", "defaults,noatime", target, mount), True)
    for name, path in settings["bind_dirs"]:
        os.makedirs(os.path.join(mount, name), exist_ok=True)
        os.makedirs(path, exist_ok=True)
        if runner(("mountpoint", "-q", path), False)[0] != 0:
            runner(("mount", "--bind", os.path.join(mount, name), path), True)
    return f"{label} ({', '.join(disks)}) mounted on {mount}"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        log("usage: supercluster-local-disk SETTINGS.json")
        return 2
    with open(args[0]) as handle:
        settings = json.load(handle)
    try:
        log(setup(settings))
    except (RuntimeError, OSError) as error:
        log(f"error: {error}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
