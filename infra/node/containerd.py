"""containerd's config.toml and unit: parallel pulls, a long progress timeout, state on the local SSD.

Written for the containerd installed on nodes (``versions.CONTAINERD_VERSION``, 1.7:
config ``version = 2``, CRI plugin ``io.containerd.grpc.v1.cri``). The 2,500-node
post's Docker settings map onto it as follows (kubernetes.md §2b):
- Docker ``max-concurrent-downloads = 10`` -> ``max_concurrent_downloads = 10``;
- kubelet ``--image-pull-progress-deadline=30m`` (removed with dockershim in 1.24) ->
  ``image_pull_progress_timeout = "30m"`` (containerd's default is 5m);
- Docker root on the instance SSD -> ``root`` on the local SSD (infra/node/state_disk.py).
"""

from __future__ import annotations

from typing import Any

import tomli_w

from infra.boot import systemd
from infra.node import install, state_disk

CONFIG_PATH = "/etc/containerd/config.toml"
UNIT = "containerd.service"
SOCKET = "/run/containerd/containerd.sock"
CRI = "io.containerd.grpc.v1.cri"
MAX_CONCURRENT_DOWNLOADS = 10
IMAGE_PULL_PROGRESS_TIMEOUT = "30m"
# The NVIDIA container runtime wrapper from nvidia-container-toolkit (preinstalled on the HPC image):
# the default runtime on GPU nodes so the device plugin and GPU pods see the GPUs.
NVIDIA_RUNTIME = "/usr/bin/nvidia-container-runtime"


def config(sandbox_image: str, gpu: bool) -> dict[str, Any]:
    runc_options = {"BinaryName": install.RUNC_PATH, "SystemdCgroup": True}
    runtimes = {"runc": {"runtime_type": "io.containerd.runc.v2", "options": runc_options}}
    if gpu:
        runtimes["nvidia"] = {
            "runtime_type": "io.containerd.runc.v2",
            "options": {"BinaryName": NVIDIA_RUNTIME, "SystemdCgroup": True},
        }
    return {
        "version": 2,
        "root": state_disk.CONTAINERD_ROOT,
        # Runtime state (sockets, task bundles) stays on tmpfs: it must not outlive a reboot.
        "state": "/run/containerd",
        "plugins": {
            CRI: {
                # Preloaded and pinned before kubelet starts (infra/node/pinned_images.py): never pulled at pod start.
                "sandbox_image": sandbox_image,
                "max_concurrent_downloads": MAX_CONCURRENT_DOWNLOADS,
                "image_pull_progress_timeout": IMAGE_PULL_PROGRESS_TIMEOUT,
                "containerd": {
                    "snapshotter": "overlayfs",
                    "default_runtime_name": "nvidia" if gpu else "runc",
                    "runtimes": runtimes,
                },
                "cni": {"bin_dir": install.CNI_BIN, "conf_dir": "/etc/cni/net.d"},
            }
        },
    }


def render_config(sandbox_image: str, gpu: bool) -> str:
    return "# Written by supercluster (infra/node/containerd.py).\n" + tomli_w.dumps(config(sandbox_image, gpu))


def unit(rdma: bool = False) -> str:
    """containerd's upstream unit (containerd.service in the release), pointing at the pinned binary.

    ``rdma`` (InfiniBand nodes): no limit on locked memory. RDMA pins the buffers it registers
    (``ibv_reg_mr``), which needs either CAP_IPC_LOCK or a large RLIMIT_MEMLOCK. Pod Security's
    baseline level does not let a tenant pod add IPC_LOCK, so the limit is lifted instead: runc sets
    only the rlimits the OCI spec names (containerd's default spec names RLIMIT_NOFILE alone), so a
    container inherits the rest from containerd, through its shim.
    """
    service = {
        "Type": "notify",
        "ExecStartPre": "-/sbin/modprobe overlay",
        "Delegate": "yes",
        "KillMode": "process",
        "Restart": "always",
        "RestartSec": "5",
        "LimitNPROC": "infinity",
        "LimitCORE": "infinity",
        "TasksMax": "infinity",
        "OOMScoreAdjust": "-999",
    }
    if rdma:
        service["LimitMEMLOCK"] = "infinity"
    return systemd.unit(
        "containerd container runtime",
        [f"{install.BIN}/containerd", "--config", CONFIG_PATH],
        after=["network.target", state_disk.UNIT, install.UNIT],
        requires=[state_disk.UNIT, install.UNIT],
        service=service,
    )
