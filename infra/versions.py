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
# SHA-256 of etcd-v3.5.21-linux-amd64.tar.gz as published in the release's SHA256SUMS
# (github.com/etcd-io/etcd/releases/tag/v3.5.21); kubespray pins the same digest. Members refuse
# any download that does not match (infra/etcd/machine.py). Bump both together.
ETCD_SHA256 = "adddda4b06718e68671ffabff2f8cee48488ba61ad82900e639d108f2148501c"
CONTAINERD_VERSION = "1.7.27"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
AZURE_CNI_VERSION = "v1.6.21"
