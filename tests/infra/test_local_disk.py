"""The one local-disk program (machine/shared/local_disk.py) that nodes and etcd members run at boot.

It is run here as the machine runs it, on a fake /sys/block, /dev/disk and mount table, with every
command it would run recorded instead of executed (formatting needs real disks and root).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import machine
from infra.boot import local_disk
from machine.shared import local_disk as program

MODEL = local_disk.NVME_MODEL_PREFIX


class Machine:
    """A fake machine: its block devices, udev's label links, its mount table, and a command log."""

    def __init__(
        self, root, disks: dict[str, str], labelled: set[str] = frozenset(), blkid_label: str = "", mounts: str = ""
    ) -> None:
        self.root, self.commands = root, []
        self.sys_block = root / "sys"
        for name, model in disks.items():
            (self.sys_block / name / "device").mkdir(parents=True)
            (self.sys_block / name / "device" / "model").write_text(model + "  \n")
        self.by_label = root / "by-label"
        self.by_label.mkdir()
        for label in labelled:
            (self.by_label / label).write_text("")
        self.mounts = root / "mounts"
        self.mounts.write_text(mounts)
        self.blkid_label = blkid_label

    def run(self, argv, check=True):
        self.commands.append(tuple(argv))
        if argv[0] == "blkid":
            return 0, self.blkid_label + "\n"
        if argv[0] == "mkfs.ext4":  # udev would create the label's link
            (self.by_label / argv[argv.index("-L") + 1]).write_text("")
        return (1, "") if argv[0] == "mountpoint" else (0, "")

    def setup(self, settings):
        return program.setup(
            settings,
            runner=self.run,
            sys_block=str(self.sys_block),
            resource_link=str(self.root / "resource"),
            by_label=str(self.by_label),
            mounts_file=str(self.mounts),
            sleep=lambda _: None,
        )

    def ran(self, tool):
        return [c for c in self.commands if c[0] == tool]


def settings(nvme=2, mount="/var/lib/etcd", label="etcd", bind_dirs=()):
    return local_disk.settings(local_disk.LocalDisks(nvme_disks=nvme), mount, label, bind_dirs)


def test_blank_nvme_disks_become_one_raid0_formatted_and_mounted(tmp_path):
    host = Machine(
        tmp_path,
        {"nvme0n1": MODEL, "nvme1n1": "MSFT NVMe Accelerator v1.0", "nvme2n1": MODEL + " v2", "sda": "Virtual_Disk"},
    )
    host.setup(settings(mount=str(tmp_path / "etcd")))
    [create] = [c for c in host.ran("mdadm") if "--create" in c]
    assert "--level=0" in create and "--raid-devices=2" in create
    assert create[-2:] == ("/dev/nvme0n1", "/dev/nvme2n1")  # never the remote NVMe OS disk
    assert host.ran("mkfs.ext4")[0][-1] == "/dev/md/etcd" and host.ran("mkfs.ext4")[0][3:5] == ("-L", "etcd")
    assert host.ran("mount") == [
        ("mount", "-o", "defaults,noatime", str(host.by_label / "etcd"), str(tmp_path / "etcd"))
    ]


def test_a_reboot_mounts_what_is_there_and_formats_nothing(tmp_path):
    host = Machine(tmp_path, {"nvme0n1": MODEL}, labelled={"sc-local"})
    host.setup(
        settings(
            nvme=1, mount=str(tmp_path / "ssd"), label="sc-local", bind_dirs=[("kubelet", str(tmp_path / "kubelet"))]
        )
    )
    assert not host.ran("mkfs.ext4") and not host.ran("wipefs") and not host.ran("mdadm")
    assert ("mount", "--bind", str(tmp_path / "ssd" / "kubelet"), str(tmp_path / "kubelet")) in host.commands


def test_a_disk_that_holds_the_label_is_never_formatted_even_before_udev_links_it(tmp_path):
    host = Machine(tmp_path, {"nvme0n1": MODEL}, blkid_label="etcd")
    host.setup(settings(nvme=1, mount=str(tmp_path / "etcd")))
    assert host.ran("blkid") and not host.ran("mkfs.ext4")


def test_the_temp_disk_when_there_is_no_nvme(tmp_path):
    host = Machine(tmp_path, {})
    (tmp_path / "sdb").write_text("")
    (tmp_path / "resource").symlink_to(tmp_path / "sdb")
    host.setup(settings(nvme=0, mount=str(tmp_path / "etcd")))
    assert host.ran("mkfs.ext4")[0][-1] == str(tmp_path / "sdb") and not host.ran("mdadm")


def test_missing_or_busy_disks_refuse_instead_of_using_the_os_disk(tmp_path):
    host = Machine(tmp_path, {"nvme0n1": MODEL})
    with pytest.raises(RuntimeError, match="found 1 of 2 local disks"):
        host.setup(settings(nvme=2))
    busy = Machine(tmp_path / "busy", {"nvme0n1": MODEL}, mounts="/dev/nvme0n1 /data ext4 rw 0 0\n")
    with pytest.raises(RuntimeError, match="mounted elsewhere"):
        busy.setup(settings(nvme=1, mount=str(tmp_path / "etcd")))
    assert not busy.ran("mkfs.ext4")


@pytest.mark.slow  # seconds: runs the program in a fresh interpreter
def test_the_program_is_standard_library_only_and_fails_in_one_line(tmp_path):
    bad = tmp_path / "settings.json"
    bad.write_text(json.dumps(settings(nvme=0) | {"wait_attempts": 1}))
    script = tmp_path / "supercluster-local-disk"
    script.write_text(machine.source(local_disk.PROGRAM))
    # -I: isolated from this repository and site-packages, as on a machine.
    result = subprocess.run([sys.executable, "-I", str(script), str(bad)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert "refusing to put state on the OS disk" in result.stderr
