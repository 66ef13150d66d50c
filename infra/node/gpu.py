"""What makes a GPU node: the HPC image's driver and runtime checked at boot, labels, and a start-up taint.

The Ubuntu HPC image (``versions.UBUNTU_HPC_IMAGE``) brings the NVIDIA driver, the
fabric manager for NVSwitch systems, the NVIDIA container toolkit and the InfiniBand
stack; nothing is installed here. Every GPU node registers with the taint
``supercluster.io/gpu-unhealthy:NoSchedule`` (infra.labels); the GPU health-check DaemonSet (an add-on)
removes it once the GPUs pass, so no job lands on a node with a bad GPU.
"""

from __future__ import annotations

import machine
from infra import labels, systemd
from infra.cloudinit import CloudConfig
from infra.config import Taint

UNHEALTHY_TAINT = Taint(key=labels.GPU_STARTUP_TAINT_KEY, value=labels.GPU_STARTUP_TAINT_VALUE,
                        effect=labels.GPU_STARTUP_TAINT_EFFECT)
UNIT = "supercluster-gpu-check.service"
SCRIPT_PATH = "/usr/local/sbin/supercluster-gpu-check"
FABRIC_MANAGER_UNIT = "nvidia-fabricmanager.service"
def add_gpu_check(cloud: CloudConfig, gpus: int, nvswitch: bool) -> None:
    cloud.add(SCRIPT_PATH, machine.source("node/gpu_check.sh"),
              permissions="0755")
    # NVSwitch systems (8-GPU ND sizes) need the fabric manager running before CUDA can use the GPUs.
    fabric = [FABRIC_MANAGER_UNIT] if nvswitch else []
    cloud.add(f"/etc/systemd/system/{UNIT}", systemd.unit(
        "Check the GPUs and the NVIDIA container runtime before kubelet registers the node",
        [SCRIPT_PATH],
        after=fabric,
        wants=fabric,
        service={"Type": "oneshot", "RemainAfterExit": "true", "Environment": f"GPUS={gpus}",
                 "Restart": "no"},
        unit_extra={"Before": "kubelet.service"},
    ))
