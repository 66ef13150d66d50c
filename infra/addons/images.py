"""Pinned container images of every add-on, in one place.

Tags only: no registry is reachable where this program is planned, so no digest could be
checked here. An unchecked digest would be worse than none (a wrong one stops every pull),
so digests are added when a release is bumped from a machine that can resolve them.
"""

from __future__ import annotations

from infra.versions import PAUSE_IMAGE

COREDNS = "registry.k8s.io/coredns/coredns:v1.12.0"  # the CoreDNS kubeadm 1.33 installs
# kubernetes/kubernetes cluster/addons/dns/nodelocaldns/nodelocaldns.yaml
NODE_LOCAL_DNS = "registry.k8s.io/dns/k8s-dns-node-cache:1.26.4"
CLUSTER_PROPORTIONAL_AUTOSCALER = "registry.k8s.io/cpa/cluster-proportional-autoscaler:v1.9.0"
# cluster-autoscaler supports exactly one Kubernetes minor per release (its README,
# "Releases"): the image follows the cluster's kubernetesVersion.
CLUSTER_AUTOSCALER = {
    "1.31": "registry.k8s.io/autoscaling/cluster-autoscaler:v1.31.1",
    "1.32": "registry.k8s.io/autoscaling/cluster-autoscaler:v1.32.2",
    "1.33": "registry.k8s.io/autoscaling/cluster-autoscaler:v1.33.6",
    "1.34": "registry.k8s.io/autoscaling/cluster-autoscaler:v1.34.5",
}
NVIDIA_DEVICE_PLUGIN = "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"
# The RDMA shared device plugin at the version NVIDIA's network operator deploys in its sample
# NicClusterPolicy (Mellanox/network-operator, "rdmaSharedDevicePlugin").
RDMA_SHARED_DEVICE_PLUGIN = "ghcr.io/mellanox/k8s-rdma-shared-dev-plugin:v1.5.3"
# DCGM: nv-hostengine and dcgmi (diagnostics); nvidia-smi comes from the driver via the runtime.
DCGM = "nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04"
# Runs the small stdlib-only scripts in machine/addons (node taint, iptables exporter).
PYTHON = "docker.io/library/python:3.12.11-slim-bookworm"
PROMETHEUS = "quay.io/prometheus/prometheus:v3.5.0"
# amtool is built at the same release (tests/tools/go/alertmanager/go.mod).
ALERTMANAGER = "quay.io/prometheus/alertmanager:v0.28.1"
NODE_EXPORTER = "quay.io/prometheus/node-exporter:v1.9.1"
KUBE_STATE_METRICS = "registry.k8s.io/kube-state-metrics/kube-state-metrics:v2.15.0"
GRAFANA = "docker.io/grafana/grafana:11.6.0"
# dcgm-exporter tags are <DCGM version>-<exporter version>: the DCGM the health check runs (DCGM above).
DCGM_EXPORTER = "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04"
# The balloon pods' only container does nothing; the pause image is preloaded on every node.
PAUSE = PAUSE_IMAGE


def cluster_autoscaler(kubernetes_version: str) -> str:
    minor = ".".join(kubernetes_version.split(".")[:2])
    return CLUSTER_AUTOSCALER[minor]
