"""Names the add-ons share with the nodes and with each other: labels, taints, priority classes.

The node-side names are agreements with the node-pool renderer (kubelet
``--node-labels`` / ``--register-with-taints`` and the scale sets' autoscaler
template tags); changing one here without the other breaks scheduling.
"""

from __future__ import annotations

# Node labels every node carries (set by the node pools at registration).
ROLE_LABEL = "supercluster.io/role"  # "gpu" or "cpu"
POOL_LABEL = "supercluster.io/pool"  # the node pool's name
# cluster-autoscaler's Azure provider recognises GPU node groups by this label
# (cloudprovider/azure: GPULabel = "kubernetes.azure.com/accelerator").
ACCELERATOR_LABEL = "kubernetes.azure.com/accelerator"
ACCELERATOR_VALUE = "nvidia"

# GPU nodes register with this taint and keep it until the GPU health check passes; the
# health check puts it back when the GPUs fail. Only pods that must run on an unproven
# node (node agents) tolerate it.
GPU_STARTUP_TAINT_KEY = "supercluster.io/gpu-unhealthy"
GPU_STARTUP_TAINT_EFFECT = "NoSchedule"
GPU_RESOURCE = "nvidia.com/gpu"

# Priority classes. Built-in ones (kubernetes.io/docs/concepts/scheduling-eviction/pod-priority-preemption):
# system-node-critical (2000001000) for per-node agents, system-cluster-critical (2000000000)
# for cluster services the cluster cannot run without.
NODE_CRITICAL = "system-node-critical"
CLUSTER_CRITICAL = "system-cluster-critical"
SYSTEM_PRIORITY = "supercluster-system"
WORKLOAD_PRIORITY = "supercluster-workloads"
BALLOON_PRIORITY = "supercluster-balloons"

# The container runtime handler the GPU nodes' containerd defines for the NVIDIA runtime
# (what `nvidia-ctk runtime configure --runtime=containerd` adds).
NVIDIA_RUNTIME_CLASS = "nvidia"

SYSTEM_NAMESPACE = "kube-system"

# Annotation cluster-autoscaler honours before it drains a node (cluster-autoscaler FAQ,
# "What types of pods can prevent CA from removing a node?").
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
