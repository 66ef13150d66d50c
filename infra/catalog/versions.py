"""Pinned versions of everything a machine installs, in one place.

Bumping one of these is a reviewed change: the offline plan shows every rendered
file it touches. Kubernetes itself comes from config (``kubernetesVersion``).
"""

from __future__ import annotations

# Base images of the machine images the program builds (infra/assembly/machine_image.py), each at an exact
# marketplace version, never "latest": every machine built from one image version runs the same OS and,
# on GPU nodes, the same driver. Versions as published in the marketplace (`az vm image list --all`);
# each is the one public deployments pin (e.g. Canonical:ubuntu-24_04-lts:server:24.04.202505280,
# microsoft-dsvm:ubuntu-hpc:2204:22.04.2024102301). Both are Gen2 images. Bumping one is a new machine
# image version (docs/node-image.md).
UBUNTU_IMAGE = {"publisher": "Canonical", "offer": "ubuntu-24_04-lts", "sku": "server", "version": "24.04.202505280"}
# Microsoft's HPC image: NVIDIA driver, fabric manager, DOCA/OFED for InfiniBand preinstalled.
UBUNTU_HPC_IMAGE = {"publisher": "microsoft-dsvm", "offer": "ubuntu-hpc", "sku": "2204", "version": "22.04.2024102301"}

ETCD_VERSION = "3.5.21"
# SHA-256 of etcd-v3.5.21-linux-amd64.tar.gz as published in the release's SHA256SUMS
# (github.com/etcd-io/etcd/releases/tag/v3.5.21); kubespray pins the same digest. Members refuse
# any download that does not match (infra/etcd/member_machine.py). Bump both together.
ETCD_SHA256 = "adddda4b06718e68671ffabff2f8cee48488ba61ad82900e639d108f2148501c"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"

# ----------------------------------------------------------------- node binaries
# The machine image's build downloads these (infra/assembly/machine_image.py, infra/node/install.py) and refuses a
# file whose sha256 differs; a machine checks at boot that each binary reports its pinned version.
# Checksums are the projects' published .sha256sum values, each confirmed in two independent public
# sources (vexxhost/ansible-collection-containers roles/*/defaults/main.yml and another pinned installer).
# containerd and runc are at least the releases that fixed the 2025 container-escape and CRI advisories
# (CONTAINERD_FLOOR, RUNC_FLOOR below; tests/stacks/test_node_runtime_floor.py). The checksums of 1.7.29
# and v1.2.8 are kubespray's (roles/kubespray_defaults/vars/main/checksums.yml, commit 005bdce7), the one
# public source found for them offline; the same file gives the 1.7.28 and v1.2.6 values pinned before,
# which the two sources above had confirmed.
CONTAINERD_VERSION = "1.7.29"  # 1.7 line: config `version = 2`, image_pull_progress_timeout since 1.7.0
CONTAINERD_SHA256 = "71d9f6e4ea4a9e108e2172b0e7f6fa137e086808db3e6874dbdb91c01102d3d4"  # linux-amd64.tar.gz
RUNC_VERSION = "v1.2.8"
RUNC_SHA256 = "09d2b25f31d3a819c97854c223ff9b36be7fdb0ce57fec709af499e1e19e8e89"  # runc.amd64
# The oldest releases a node may run. runc 1.2.8 (also 1.3.3, 1.4.0-rc.3) fixed CVE-2025-31133 (masked
# paths), CVE-2025-52565 (/dev/console bind mount) and CVE-2025-52881 (redirected procfs writes), each a
# container escape to root on the node (runc security advisories, 2025-11-05). containerd 1.7.29 fixed
# CVE-2024-25621 (CRI state directories created world-readable: local privilege escalation) and
# CVE-2025-64329 (CRI Attach leaking goroutines until the node runs out of memory) (containerd security
# advisories, 2025-11-06).
RUNC_FLOOR = (1, 2, 8)
CONTAINERD_FLOOR = (1, 7, 29)
# The NVIDIA Container Toolkit, the default runtime on GPU nodes: every release up to 1.17.7 lets a container image
# run code as root on the host through the toolkit's hooks (CVE-2025-23266, NVIDIA's July 2025 bulletin; the CVE
# record's affected range). The GPU image build installs the pinned release over whatever the HPC base carries,
# from NVIDIA's apt repository once its key has the pinned fingerprint (the install guide's repository and key;
# the fingerprint as several independent public installers pin it); GPU nodes check the floor at boot.
NVIDIA_CONTAINER_TOOLKIT_FLOOR = (1, 17, 8)
NVIDIA_CONTAINER_TOOLKIT_VERSION = "1.17.8-1"  # the Debian version of its four packages
NVIDIA_TOOLKIT_REPOSITORY = "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)"
NVIDIA_TOOLKIT_KEY_URL = "https://nvidia.github.io/libnvidia-container/gpgkey"
NVIDIA_TOOLKIT_KEY_FINGERPRINT = "C95B321B61E88C1809C4F759DDCAE044F796ECB0"
CNI_PLUGINS_VERSION = "v1.6.2"  # loopback (containerd's CRI needs it) and portmap (in the Azure conflist)
CNI_PLUGINS_SHA256 = "b8e811578fb66023f90d2e238d80cec3bdfca4b44049af74c374d4fae0f9c090"  # linux-amd64
# Azure CNI publishes no checksum file; the installer checks the binary reports exactly this version
# (`azure-vnet -v` prints "Azure CNI Version <v>", Azure/azure-container-networking cni/network/plugin/main.go).
AZURE_CNI_VERSION = "v1.6.21"

# Control plane: kube-apiserver and kube-controller-manager come from dl.k8s.io at kubernetesVersion.
# kube-scheduler is the kubernetes-sigs/scheduler-plugins build (upstream kube-scheduler plus the
# Coscheduling plugin), pinned by the manifest-list digest the Kubernetes image promoter published
# (kubernetes/k8s.io registry.k8s.io/images/k8s-staging-scheduler-plugins/images.yaml). Its minor
# version tracks the Kubernetes client libraries it is built with (scheduler-plugins README,
# "Compatibility Matrix"). 1.34 runs v0.33.5: the version-skew policy lets kube-scheduler be one
# minor older than kube-apiserver, and v0.33.5 is the newest release whose digest is recorded here.
# The newest patch release of each minor above that this project has confirmed published; kubernetesVersion
# must be 1.<minor>.0 up to it (infra.config.value_checks), since every machine downloads exactly that release from
# dl.k8s.io. Sources: kubernetes.io/releases/1.33/ (1.33.10, 2026-03-19); the v1.31.13, v1.32.9 and v1.34.1
# release tags (kubernetes/kubernetes). Raise one when a newer patch is confirmed.
KUBERNETES_NEWEST_PATCH = {"1.31": 13, "1.32": 9, "1.33": 10, "1.34": 1}
SCHEDULER_PLUGINS_IMAGE = "registry.k8s.io/scheduler-plugins/kube-scheduler"
SCHEDULER_PLUGINS_BY_KUBERNETES_MINOR = {
    "1.31": ("v0.31.8", "sha256:601103bedfa22b115aaba6e0f3ffe85c563c1e98841237a3c01ce110433feab2"),
    "1.32": ("v0.32.7", "sha256:da9916a198cbbff618cb43ba6d20604ef312b2a4166fb7eded279344c442c84a"),
    "1.33": ("v0.33.5", "sha256:eb2474076eacc7b6ed0663a08ab87383caade288ebee7a4774d89c1bb4a1acee"),
    "1.34": ("v0.33.5", "sha256:eb2474076eacc7b6ed0663a08ab87383caade288ebee7a4774d89c1bb4a1acee"),
}
