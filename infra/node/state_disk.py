"""Where a node keeps kubelet and containerd state: its local SSDs, never the OS disk.

The 2,500-node post moved Docker's root to the instance SSD to speed up pulls of
17 GB images; here containerd's root, kubelet's directory (emptyDir volumes, pod
state) and the pod logs all live on the local NVMe disks (RAID0 when there are
several) or, on sizes without NVMe, on the temp disk. The unit assembles, formats
(only when blank) and mounts them on every boot, before containerd and kubelet
(machine/shared/local_disk.py, the same program etcd members use; infra/boot/local_disk.py).
"""

from __future__ import annotations

from infra.boot import local_disk
from infra.boot.cloudinit import CloudConfig
from infra.boot.local_disk import LocalDisks
from infra.facts.host_paths import KUBELET_ROOT, LOCAL_SSD_MOUNT

__all__ = ["LocalDisks", "add_local_disk"]

MOUNT = LOCAL_SSD_MOUNT
LABEL = "sc-local"
UNIT = "supercluster-local-disk.service"
CONTAINERD_ROOT = f"{MOUNT}/containerd"
# Bind mounts onto the local filesystem: kubelet's root (emptyDir, pod volumes, its rotated
# certificates) and the pod logs, as GCE's kube-up does with its local SSDs (configure-helper.sh).
BIND_DIRS = (("kubelet", KUBELET_ROOT), ("pod-logs", "/var/log/pods"))


def add_local_disk(cloud: CloudConfig, disks: LocalDisks) -> None:
    local_disk.add_local_disk(
        cloud,
        disks,
        unit=UNIT,
        mount=MOUNT,
        label=LABEL,
        bind_dirs=BIND_DIRS,
        description="Local SSDs for kubelet and containerd state (assemble, format when blank, mount)",
        before=["containerd.service", "kubelet.service"],
    )
