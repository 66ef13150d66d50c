"""What makes a GPU node: the HPC image's driver and runtime checked at boot, labels, and a start-up taint.

The Ubuntu HPC image (``versions.UBUNTU_HPC_IMAGE``) brings the NVIDIA driver, the
fabric manager for NVSwitch systems and the InfiniBand stack; the GPU image build installs the
pinned NVIDIA container toolkit over it (``toolkit_install_environment``), and the boot check
refuses a toolkit older than ``versions.NVIDIA_CONTAINER_TOOLKIT_FLOOR``. Every GPU node registers with the taint
``supercluster.io/gpu-unhealthy:NoSchedule`` (infra.facts.labels); the GPU health-check DaemonSet (an add-on)
removes it once the GPUs pass, so no job lands on a node with a bad GPU.
"""

from __future__ import annotations

from typing import Any

import tomli_w

import machine
from infra.boot import systemd
from infra.boot.cloudinit import CloudConfig
from infra.catalog import versions
from infra.config.cluster_config import Taint
from infra.facts import labels
from infra.node import install

UNHEALTHY_TAINT = Taint(
    key=labels.GPU_STARTUP_TAINT_KEY, value=labels.GPU_STARTUP_TAINT_VALUE, effect=labels.GPU_STARTUP_TAINT_EFFECT
)
UNIT = "supercluster-gpu-check.service"
SCRIPT_PATH = "/usr/local/sbin/supercluster-gpu-check"
FABRIC_MANAGER_UNIT = "nvidia-fabricmanager.service"
# The NVIDIA container toolkit's own config, read by nvidia-container-runtime (containerd's default
# runtime on GPU nodes) and its hook. Keys it does not find keep the toolkit's defaults.
TOOLKIT_CONFIG_PATH = "/etc/nvidia-container-runtime/config.toml"


def toolkit_config() -> dict[str, Any]:
    """Which GPUs a container sees is the device plugin's answer, never the pod's own environment.

    With ``accept-nvidia-visible-devices-envvar-when-unprivileged`` (default true) any pod, GPU
    request or not, could set ``NVIDIA_VISIBLE_DEVICES=all`` and see every GPU of the node. Set to
    false, only privileged containers (the node agents in kube-system) are trusted with the variable;
    everyone else gets exactly the devices the device plugin lists as volume mounts under
    ``/var/run/nvidia-container-devices`` (its ``DEVICE_LIST_STRATEGY=volume-mounts``), which
    ``accept-nvidia-visible-devices-as-volume-mounts`` (default false) lets the toolkit read.
    """
    return {
        "accept-nvidia-visible-devices-envvar-when-unprivileged": False,
        "accept-nvidia-visible-devices-as-volume-mounts": True,
        # The low-level runtime it wraps: the node's pinned runc, the one containerd runs for runc pods.
        "nvidia-container-runtime": {"runtimes": [install.RUNC_PATH]},
    }


def render_toolkit_config() -> str:
    return "# Written by supercluster (infra/node/gpu.py).\n" + tomli_w.dumps(toolkit_config())


TOOLKIT_INSTALL_SCRIPT = "node/nvidia_toolkit.sh"  # machine/, run by the GPU image build


def toolkit_install_environment() -> dict[str, str]:
    """The parameters of the image build's toolkit install (machine/node/nvidia_toolkit.sh)."""
    return {
        "TOOLKIT_VERSION": versions.NVIDIA_CONTAINER_TOOLKIT_VERSION,
        "KEY_URL": versions.NVIDIA_TOOLKIT_KEY_URL,
        "KEY_FINGERPRINT": versions.NVIDIA_TOOLKIT_KEY_FINGERPRINT,
        "REPOSITORY": versions.NVIDIA_TOOLKIT_REPOSITORY,
    }


def add_gpu_check(cloud: CloudConfig, gpus: int, nvswitch: bool) -> None:
    floor = ".".join(map(str, versions.NVIDIA_CONTAINER_TOOLKIT_FLOOR))
    cloud.add(TOOLKIT_CONFIG_PATH, render_toolkit_config(), permissions="0644")
    cloud.add(SCRIPT_PATH, machine.source("node/gpu_check.sh"), permissions="0755", compressed=True)
    # NVSwitch systems (8-GPU ND sizes) need the fabric manager running before CUDA can use the GPUs.
    fabric = [FABRIC_MANAGER_UNIT] if nvswitch else []
    cloud.add(
        f"/etc/systemd/system/{UNIT}",
        systemd.unit(
            "Check the GPUs and the NVIDIA container runtime's version before kubelet registers the node",
            [SCRIPT_PATH],
            after=fabric,
            wants=fabric,
            service={
                "Type": "oneshot",
                "RemainAfterExit": "true",
                "Environment": f"GPUS={gpus} TOOLKIT_FLOOR={floor}",
                "Restart": "no",
            },
            unit_extra={"Before": "kubelet.service"},
        ),
    )
