"""Local SSDs for a machine's state: one program (machine/shared/local_disk.py) on every machine.

Nodes keep containerd's root, kubelet's directory and pod logs there (infra/node/state_disk.py),
etcd members their data directory (infra/etcd/member_machine.py). Each machine gets the program, its
settings file (JSON, below) and a oneshot unit that runs before the services that need the disk.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import machine
from infra.boot import systemd
from infra.boot.cloudinit import CloudConfig
from infra.catalog.vm_sizes import VmSize

PROGRAM = "shared/local_disk.py"
SCRIPT_PATH = "/usr/local/sbin/supercluster-local-disk"
SETTINGS_PATH = "/etc/supercluster/local-disk.json"
# Azure's local NVMe disks identify as "Microsoft NVMe Direct Disk" (and "... v2" on newer sizes);
# remote disks on NVMe sizes are "MSFT NVMe Accelerator v1.0" (Azure/azure-vm-utils,
# udev/80-azure-disk.rules), so a prefix match never picks the OS or a data disk.
NVME_MODEL_PREFIX = "Microsoft NVMe Direct Disk"
# Disks are looked for every 2 s for up to 3 minutes while udev names them, then the unit fails.
WAIT_ATTEMPTS = 90


@dataclass(frozen=True)
class LocalDisks:
    """The machine's local SSDs: NVMe disks (all of them, RAID0) or else the temp disk."""

    nvme_disks: int

    @classmethod
    def of(cls, size: VmSize) -> LocalDisks:
        if not size.has_local_disk:
            raise ValueError(f"{size.name} has no local SSD for the machine's state")
        return cls(nvme_disks=size.nvme_disks)

    @property
    def uses_temp_disk(self) -> bool:
        return self.nvme_disks == 0


def settings(disks: LocalDisks, mount: str, label: str, bind_dirs: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    """The program's settings file."""
    return {
        "mount": mount,
        "label": label,
        "nvme_disks": disks.nvme_disks,
        "nvme_model_prefix": NVME_MODEL_PREFIX,
        "bind_dirs": [list(pair) for pair in bind_dirs],
        "wait_attempts": WAIT_ATTEMPTS,
    }


def add_local_disk(
    cloud: CloudConfig,
    disks: LocalDisks,
    *,
    unit: str,
    description: str,
    mount: str,
    label: str,
    before: Sequence[str],
    bind_dirs: Sequence[tuple[str, str]] = (),
) -> None:
    cloud.add(SCRIPT_PATH, machine.source(PROGRAM), permissions="0755", compressed=True)
    cloud.add(SETTINGS_PATH, json.dumps(settings(disks, mount, label, bind_dirs), indent=2) + "\n")
    cloud.add(
        f"/etc/systemd/system/{unit}",
        systemd.unit(
            description,
            [SCRIPT_PATH, SETTINGS_PATH],
            after=["local-fs.target"],
            service={"Type": "oneshot", "RemainAfterExit": "true", "Restart": "on-failure", "RestartSec": "10"},
            unit_extra={"Before": " ".join(before)},
        ),
    )
    if disks.uses_temp_disk:
        # The temp disk is ours: an entry with no mount point stops cloud-init mounting it at /mnt
        # (cloud-init cc_mounts: "[ swap ]" removes a previously listed mount).
        cloud.mounts.append(["ephemeral0"])
