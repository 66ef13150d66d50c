"""Names the add-ons share with each other: priority classes, the runtime class, the namespace.

Node labels, taints and resources are the node vocabulary in ``infra.facts.labels``, shared with the
node renderers: add-ons import them from there, never spell them.
"""

from __future__ import annotations

from infra.facts.host_paths import KUBELET_ROOT

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
MONITORING_NAMESPACE = "monitoring"

# Where kubelet listens for device plugins (its default --device-plugins directory; the device plugin API,
# kubernetes.io/docs/concepts/extend-kubernetes/compute-storage-net/device-plugins). The GPU and RDMA
# plugins register their sockets there.
DEVICE_PLUGIN_DIR = f"{KUBELET_ROOT}/device-plugins"
# Where kubelet's plugin watcher finds plugins that register themselves (the RDMA plugin watches it).
PLUGINS_REGISTRY_DIR = f"{KUBELET_ROOT}/plugins_registry"

# Annotation cluster-autoscaler honours before it drains a node (cluster-autoscaler FAQ,
# "What types of pods can prevent CA from removing a node?").
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
