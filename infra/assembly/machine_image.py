"""The machine image every VM and scale set boots, built by the program with Azure VM Image Builder.

The 2,500-node post's lesson: a node must not depend on the internet to start (a failed pull of
the pause image stopped nodes, so OpenAI baked it and their biggest images into the machine
image). Here two images are built into the cluster's Azure Compute Gallery, each from a base
image at an exact version (``infra/catalog/versions.py``, never ``latest``, so two nodes of one job never
boot different GPU drivers):

- ``cpu``: Ubuntu 24.04; CPU node pools, NAT hosts, etcd members and apiservers;
- ``gpu``: Microsoft's Ubuntu HPC image (driver, fabric manager, InfiniBand) and the pinned NVIDIA Container
  Toolkit over it (``infra.node.gpu``); GPU node pools.

Each carries every binary a machine runs, at the pins the machines check at boot (the same
manifests: ``infra/node/install.py``, ``infra/control_plane/binaries.py``, ``infra/etcd/member_machine.py``),
the Debian packages the boot scripts use (``PACKAGES``), and the pause image plus ``images.preload``
as image archives that a node imports into containerd (its root is on the local SSD, blank
after every reallocation) instead of pulling them. The customizer script is rendered here from
those pins and runs on Image Builder's build VM, which has the internet; the cluster's machines
then boot with nothing to download (tests/stacks/test_no_internet_boot.py).

Every machine references one exact gallery image version, ``machineImageVersion``: a
new version is a planned, staged rollout (docs/node-image.md).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import shlex
from typing import Any

import machine
from infra.catalog import versions
from infra.catalog.image_refs import parse_image
from infra.config import naming
from infra.config.cluster_config import ClusterConfig, NodePoolConfig
from infra.config.errors import ConfigError
from infra.config.sizing import MAX_VMS_PER_SCALE_SET
from infra.control_plane import binaries as control_plane_install
from infra.day2.deploy_rules import MACHINE_IMAGES_OUTPUT
from infra.etcd import member_machine as etcd_machine
from infra.facts.labels import ROLE_GPU
from infra.node import PACKAGES as NODE_PACKAGES
from infra.node import gpu
from infra.node import install as node_install
from infra.node import pinned_images as node_images
from infra.node.pool import preload_images

KINDS = naming.IMAGE_KINDS
# The image every dedicated machine boots (etcd members, apiservers, NAT hosts), and CPU pools too.
DEDICATED_KIND = "cpu"
BASE_IMAGES = {"cpu": versions.UBUNTU_IMAGE, "gpu": versions.UBUNTU_HPC_IMAGE}
# Every Debian package any machine's boot scripts use: the nodes', the control plane's (the customizer
# also uses skopeo to unpack kube-scheduler), iptables for the rule loaders (infra/network/iptables.py) and mdadm
# for etcd's striped NVMe disks. cloud-init installs none of them (infra/boot/cloudinit.py renders no apt).
PACKAGES = tuple(dict.fromkeys((*NODE_PACKAGES, *control_plane_install.PACKAGES, "iptables", "mdadm")))

# Azure Compute Gallery: "one replica for every 20 VMs created concurrently" and at most 100 replicas
# per image version (learn.microsoft.com/azure/virtual-machines/azure-compute-gallery, "Scaling", "Limits").
VMS_PER_REPLICA = 20
MAX_REPLICAS = 100
# Image Builder's build VM: the customizer downloads and unpacks, nothing more (any Gen2 size works).
BUILD_VM_SIZE = "Standard_D4s_v5"
# The build VM's OS disk holds the unpacked binaries and the image archives (the HPC base is ~64 GB).
BUILD_OS_DISK_GB = {"cpu": 64, "gpu": 128}
BUILD_TIMEOUT_MINUTES = 120
WORK_DIR = "/opt/supercluster-image-build"


def kind_of_pool(pool: NodePoolConfig) -> str:
    return "gpu" if pool.role == ROLE_GPU else "cpu"


def kinds_in_use(config: ClusterConfig) -> tuple[str, ...]:
    """``cpu`` always (control plane, etcd, NAT hosts); ``gpu`` when a GPU pool exists."""
    return tuple(k for k in KINDS if k == DEDICATED_KIND or any(kind_of_pool(p) == k for p in config.node_pools))


# Replicas for the most VMs Azure may create at once from one image: a whole scale set (the autoscaler
# can grow one to its capacity in one request). A constant, not a function of the pools: Azure refuses
# to update an image template, so anything the template says may change only with a new image version.
REPLICAS = min(MAX_REPLICAS, math.ceil(MAX_VMS_PER_SCALE_SET / VMS_PER_REPLICA))


HEREDOC_END = "SUPERCLUSTER_FILE_END"


def _write(path: str, content: str, mode: str) -> list[str]:
    """Writes ``content`` verbatim (a quoted here-document: no expansion), so the plan shows it as it is."""
    if HEREDOC_END in content.splitlines():
        raise ValueError(f"{path}: its content holds the here-document's end marker")
    return [
        f"install -d -m 0755 {shlex.quote(path.rsplit('/', 1)[0])}",
        f"cat > {shlex.quote(path)} <<'{HEREDOC_END}'\n{content.rstrip(chr(10))}\n{HEREDOC_END}",
        f"chmod {mode} {shlex.quote(path)}",
    ]


def customizer_script(config: ClusterConfig, kind: str) -> str:
    """What Image Builder runs (as root) on the build VM: packages, binaries, image archives."""
    version = config.kubernetes_version
    manifest = json.dumps(node_install.manifest(version), indent=1)
    lines = [
        "#!/bin/bash",
        f"# Written by supercluster: the {kind} machine image's contents, from the program's pins",
        "# (infra/machine_image.py). Runs once, on Image Builder's build VM.",
        "set -euo pipefail",
        "export DEBIAN_FRONTEND=noninteractive",
        "apt-get update",
        f"apt-get install -y --no-install-recommends {' '.join(PACKAGES)}",
        # Node binaries: the boot installer itself, with the full manifest (URLs and checksums).
        *_write(f"{WORK_DIR}/install.py", machine.source("node/install.py"), "0755"),
        *_write(f"{WORK_DIR}/install.json", manifest + "\n", "0644"),
        f"python3 {WORK_DIR}/install.py {WORK_DIR}/install.json",
    ]
    if kind == "cpu":
        lines += [
            *_write(f"{WORK_DIR}/control-plane.sh", control_plane_install.install_script(version), "0755"),
            f"{WORK_DIR}/control-plane.sh",
            *_write(f"{WORK_DIR}/etcd.sh", etcd_machine.install_script(), "0755"),
            f"{WORK_DIR}/etcd.sh",
        ]
    if kind == "gpu":
        environment = " ".join(f"{k}={shlex.quote(v)}" for k, v in gpu.toolkit_install_environment().items())
        lines += [
            *_write(f"{WORK_DIR}/nvidia-toolkit.sh", machine.source(gpu.TOOLKIT_INSTALL_SCRIPT), "0755"),
            f"{environment} {WORK_DIR}/nvidia-toolkit.sh",
        ]
    lines += _image_archives(preload_images(config))
    lines += [f"rm -rf {WORK_DIR}", "apt-get clean"]
    return "\n".join(lines) + "\n"


def _image_archives(references: tuple[str, ...]) -> list[str]:
    """Pulls each image with a throwaway containerd and exports it where nodes import it from."""
    ctr = f"{node_install.BIN}/ctr --address {WORK_DIR}/containerd.sock --namespace k8s.io"
    lines = [
        f"install -d -m 0755 {node_images.ARCHIVE_DIR}",
        f"{node_install.BIN}/containerd --root {WORK_DIR}/containerd-root --state {WORK_DIR}/containerd-state "
        f"--address {WORK_DIR}/containerd.sock & containerd_pid=$!",
        f"for _ in $(seq 60); do [ -S {WORK_DIR}/containerd.sock ] && break; sleep 1; done",
    ]
    for reference in references:
        ref = parse_image(reference)
        assert ref is not None, reference  # images.preload is validated by infra/config/cluster_config.py
        q = shlex.quote(str(ref))
        lines += [
            f"{ctr} images pull --platform linux/amd64 {q}",
            f"{ctr} images export --platform linux/amd64 {node_images.archive_path(str(ref))} {q}",
        ]
    lines += [
        "kill $containerd_pid",
        "wait $containerd_pid || true",
        f"rm -rf {WORK_DIR}/containerd-root {WORK_DIR}/containerd-state",
    ]
    return lines


def fingerprint(config: ClusterConfig, kind: str) -> str:
    """A short digest of what the image carries: a changed pin changes it (a tag on the template)."""
    base = json.dumps(BASE_IMAGES[kind], sort_keys=True)
    return hashlib.sha256((base + customizer_script(config, kind)).encode()).hexdigest()[:16]


BUILD_SCRIPT = "/tmp/supercluster-image-build.sh"


def customizer_commands(config: ClusterConfig, kind: str) -> list[str]:
    """The template's Shell customizer: writes the rendered script and runs it as root (Image Builder
    runs inline commands as its own sudo-capable user)."""
    encoded = base64.b64encode(customizer_script(config, kind).encode()).decode()
    return [
        f"echo {encoded} | base64 -d | sudo tee {BUILD_SCRIPT} >/dev/null",
        f"sudo bash {BUILD_SCRIPT}",
        f"sudo rm -f {BUILD_SCRIPT}",
    ]


def script_of(commands: list[str]) -> str | None:
    """The script ``customizer_commands`` carries, for the plan's files (None for other commands)."""
    first = commands[0].split() if commands else []
    if len(first) < 2 or first[0] != "echo" or BUILD_SCRIPT not in first:
        return None
    return base64.b64decode(first[1]).decode()


# The stack output the next deploy reads (infra.assembly.desired_cluster.check_last_deploy): which version was built
# with what.
OUTPUT_NAME = MACHINE_IMAGES_OUTPUT


def built(config: ClusterConfig) -> dict[str, Any]:
    """``{"version": ..., "contents": {kind: fingerprint}}``: what this deploy's templates build."""
    return {
        "version": config.machine_image_version,
        "contents": {kind: fingerprint(config, kind) for kind in kinds_in_use(config)},
    }


def check_version_not_reused(previous: object, config: ClusterConfig) -> None:
    """Refuses to build other contents under a version the last deploy already built: Azure cannot
    overwrite an image version, and machines would boot binaries their checks refuse."""
    if not isinstance(previous, dict) or previous.get("version") != config.machine_image_version:
        return  # first deploy, or a new version
    contents = previous.get("contents")
    before: dict[str, Any] = contents if isinstance(contents, dict) else {}
    changed = sorted(kind for kind, now in built(config)["contents"].items() if before.get(kind) not in (None, now))
    if changed:
        raise ConfigError(
            "machineImageVersion",
            config.machine_image_version,
            f"a version not built before: what the {' and '.join(changed)} image carries changed "
            "(kubernetesVersion, a pin in infra/catalog/versions.py or images.preload) and Azure cannot "
            "overwrite an image version (docs/node-image.md)",
        )
