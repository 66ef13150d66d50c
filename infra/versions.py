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
CONTAINERD_VERSION = "1.7.27"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
AZURE_CNI_VERSION = "v1.6.21"

# Control plane: kube-apiserver and kube-controller-manager come from dl.k8s.io at kubernetesVersion.
# kube-scheduler is the kubernetes-sigs/scheduler-plugins build (upstream kube-scheduler plus the
# Coscheduling plugin), pinned by the manifest-list digest the Kubernetes image promoter published
# (kubernetes/k8s.io registry.k8s.io/images/k8s-staging-scheduler-plugins/images.yaml). Its minor
# version tracks the Kubernetes client libraries it is built with (scheduler-plugins README,
# "Compatibility Matrix"). 1.34 runs v0.33.5: the version-skew policy lets kube-scheduler be one
# minor older than kube-apiserver, and v0.33.5 is the newest release whose digest is recorded here.
SCHEDULER_PLUGINS_IMAGE = "registry.k8s.io/scheduler-plugins/kube-scheduler"
SCHEDULER_PLUGINS_BY_KUBERNETES_MINOR = {
    "1.31": ("v0.31.8", "sha256:601103bedfa22b115aaba6e0f3ffe85c563c1e98841237a3c01ce110433feab2"),
    "1.32": ("v0.32.7", "sha256:da9916a198cbbff618cb43ba6d20604ef312b2a4166fb7eded279344c442c84a"),
    "1.33": ("v0.33.5", "sha256:eb2474076eacc7b6ed0663a08ab87383caade288ebee7a4774d89c1bb4a1acee"),
    "1.34": ("v0.33.5", "sha256:eb2474076eacc7b6ed0663a08ab87383caade288ebee7a4774d89c1bb4a1acee"),
}
