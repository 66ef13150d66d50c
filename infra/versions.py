"""Pinned versions of everything a machine installs, in one place.

Bumping one of these is a reviewed change: the offline plan shows every rendered
file it touches. Kubernetes itself comes from config (``kubernetesVersion``).
"""

from __future__ import annotations

# OS images. Marketplace images (not custom images) keep the 1,000-VM scale-set limit.
# "latest" is resolved when a VM or scale-set instance is created; running machines never
# change image under a `pulumi up` (upgrade policy Manual, see components/node_pool.py).
UBUNTU_IMAGE = {"publisher": "Canonical", "offer": "ubuntu-24_04-lts", "sku": "server", "version": "latest"}
# Microsoft's HPC image: NVIDIA driver, fabric manager, DOCA/OFED for InfiniBand preinstalled.
UBUNTU_HPC_IMAGE = {"publisher": "microsoft-dsvm", "offer": "ubuntu-hpc", "sku": "2204", "version": "latest"}

ETCD_VERSION = "3.5.21"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"

# ----------------------------------------------------------------- node binaries
# Every node downloads these at boot (infra/node/install.py) and refuses a file whose sha256 differs.
# Checksums are the projects' published .sha256sum values, each confirmed in two independent public
# sources (vexxhost/ansible-collection-containers roles/*/defaults/main.yml and another pinned installer).
CONTAINERD_VERSION = "1.7.28"  # 1.7 line: config `version = 2`, image_pull_progress_timeout since 1.7.0
CONTAINERD_SHA256 = "7a8c262deb63becc877e82d23749e4f99f4a17e8e660f9b8c257ca87a5c056b6"  # linux-amd64.tar.gz
RUNC_VERSION = "v1.2.6"
RUNC_SHA256 = "0774f49d1b1eebb5849e644db5e4dc6f2b06cee05f13b3d17d5d6ba62d6f2ebc"  # runc.amd64
CNI_PLUGINS_VERSION = "v1.6.2"  # loopback (containerd's CRI needs it) and portmap (in the Azure conflist)
CNI_PLUGINS_SHA256 = "b8e811578fb66023f90d2e238d80cec3bdfca4b44049af74c374d4fae0f9c090"  # linux-amd64
# Azure CNI publishes no checksum file; the installer checks the binary reports exactly this version
# (`azure-vnet -v` prints "Azure CNI Version <v>", Azure/azure-container-networking cni/network/plugin/main.go).
AZURE_CNI_VERSION = "v1.6.21"
