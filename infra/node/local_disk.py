"""Where a node keeps kubelet and containerd state: its local SSDs, never the OS disk.

The 2,500-node post moved Docker's root to the instance SSD to speed up pulls of
17 GB images; here containerd's root, kubelet's directory (emptyDir volumes, pod
state) and the pod logs all live on the local NVMe disks (RAID0 when there are
several) or, on sizes without NVMe, on the temp disk. The unit assembles, formats
(only when blank) and mounts them on every boot, before containerd and kubelet.
"""

from __future__ import annotations

from dataclasses import dataclass

import machine
from infra import systemd
from infra.cloudinit import CloudConfig
from infra.vm_sizes import VmSize

MOUNT = "/var/lib/local-ssd"
LABEL = "sc-local"
UNIT = "supercluster-local-disk.service"
SCRIPT_PATH = "/usr/local/sbin/supercluster-local-disk"
ENV_PATH = "/etc/supercluster/local-disk.env"
CONTAINERD_ROOT = f"{MOUNT}/containerd"
# Bind mounts onto the local filesystem: kubelet's root (emptyDir, pod volumes, its rotated
# certificates) and the pod logs, as GCE's kube-up does with its local SSDs (configure-helper.sh).
BIND_DIRS = (("kubelet", "/var/lib/kubelet"), ("pod-logs", "/var/log/pods"))


@dataclass(frozen=True)
class LocalDisks:
    """The machine's local SSDs: NVMe disks (all of them, RAID0) or else the temp disk."""

    nvme_disks: int

    @classmethod
    def of(cls, size: VmSize) -> LocalDisks:
        if not size.has_local_disk:
            raise ValueError(f"{size.name} has no local SSD for kubelet and containerd state")
        return cls(nvme_disks=size.nvme_disks)

    @property
    def uses_temp_disk(self) -> bool:
        return self.nvme_disks == 0


def environment(disks: LocalDisks) -> dict[str, str]:
    return {
        "NVME_DISKS": str(disks.nvme_disks),
        "LABEL": LABEL,
        "MOUNT": MOUNT,
        "BIND_DIRS": " ".join(f"{name}:{path}" for name, path in BIND_DIRS),
    }


def render_environment(values: dict[str, str]) -> str:
    """A systemd EnvironmentFile (values are plain words and paths, quoted for the spaces)."""
    return "".join(f'{key}="{value}"\n' for key, value in values.items())


def add_local_disk(cloud: CloudConfig, disks: LocalDisks) -> None:
    script = machine.source("node/local_disk.sh")
    cloud.add(SCRIPT_PATH, script, permissions="0755")
    cloud.add(ENV_PATH, render_environment(environment(disks)))
    cloud.add(f"/etc/systemd/system/{UNIT}", systemd.unit(
        "Local SSDs for kubelet and containerd state (assemble, format when blank, mount)",
        [SCRIPT_PATH],
        after=["local-fs.target"],
        service={"Type": "oneshot", "RemainAfterExit": "true", "EnvironmentFile": ENV_PATH,
                 "Restart": "no"},
        unit_extra={"Before": "containerd.service kubelet.service"},
    ))
    if disks.uses_temp_disk:
        # The temp disk is ours: an entry with no mount point stops cloud-init mounting it at /mnt
        # (cloud-init cc_mounts: "[ swap ]" removes a previously listed mount).
        cloud.mounts.append(["ephemeral0"])
