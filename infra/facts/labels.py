"""The node vocabulary: every label and taint a node registers with, and that add-ons select on.

Defined once, here. The node renderers (``infra.node``, ``infra.nat_hosts``) put these on the
kubelet's ``--node-labels`` and ``registerWithTaints``, the scale sets' autoscaler template tags
are derived from the same labels, and the add-ons (``infra.addons``) build their node selectors,
affinities and tolerations from the same names. A selector that names a label no node registers
is what left the autoscaler, Prometheus and the GPU add-ons unschedulable once; the cluster-in-a-box
harness (tests/e2e) now boots the rendered nodes and checks every workload binds.

Pure constants and one function; imports only the shared facts (``infra.facts``).
"""

from __future__ import annotations

from collections.abc import Mapping

from infra.facts import roles

# ------------------------------------------------------------------------------ labels

ROLE_LABEL = "supercluster.io/role"
ROLE_GPU = roles.GPU_POOL  # a GPU pool's node (nodePools[].role)
ROLE_CPU = roles.CPU_POOL  # a CPU pool's node (nodePools[].role)
# A system pool's node (nodePools[].role): CPU machines tainted with SYSTEM_TAINT_KEY, which no tenant
# namespace may tolerate (infra/control_plane/admission.py). Only they carry the identities that can change
# machines (the cluster autoscaler's) and only they run monitoring (docs/security.md, "An add-on").
ROLE_SYSTEM = roles.SYSTEM_POOL
# Where Prometheus runs (infra.addons.k8s.on_system_pool, its nodeSelector) and so the only pools whose subnets
# reach etcd's plain-HTTP metrics port and the control plane's secure ports (infra/network/security_groups.py).
MONITORING_ROLE = ROLE_SYSTEM
ROLE_NAT_HOST = roles.NAT_HOST.machine  # a NAT host: a tainted node that runs kube-proxy for the service range
POOL_ROLES = roles.POOL_ROLES

POOL_LABEL = "supercluster.io/pool"  # the node pool's name
# Kubelet sets it on every node to the node's host name (well-known labels, kubernetes.io/docs/reference/labels-
# annotations-taints/#kubernetesiohostname): the topology key that spreads replicas one per node.
HOSTNAME_LABEL = "kubernetes.io/hostname"
INFINIBAND_LABEL = "supercluster.io/infiniband"  # "true" on nodes of InfiniBand pools
# The InfiniBand domain a node is in: the shard (scale set) it belongs to. InfiniBand connects only the
# VMs of one scale set with a single placement group, at most 100 VMs (infra/config/sizing.py), so the pods of a
# job that talk over InfiniBand must all run on nodes with one value of this label (docs/infiniband-jobs.md).
INFINIBAND_DOMAIN_LABEL = "supercluster.io/infiniband-domain"
GPU_COUNT_LABEL = "supercluster.io/gpu-count"
# The device plugin's and GPU operator's conventional node selector.
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
# cluster-autoscaler's Azure provider recognises GPU node groups by this label
# (cluster-autoscaler cloudprovider/azure: GPULabel = "kubernetes.azure.com/accelerator").
ACCELERATOR_LABEL = "kubernetes.azure.com/accelerator"
ACCELERATOR_VALUE = "nvidia"
# Well-known labels the kubelet may set on its own Node (kubernetes.io/docs/reference/labels-annotations-taints/;
# NodeRestriction allows a kubelet these under kubernetes.io).
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
REGION_LABEL = "topology.kubernetes.io/region"
# Derived by the program from a pool's settings; a pool's configured labels may not set them.
DERIVED_LABELS = (
    ROLE_LABEL,
    POOL_LABEL,
    INFINIBAND_LABEL,
    INFINIBAND_DOMAIN_LABEL,
    GPU_COUNT_LABEL,
    GPU_PRESENT_LABEL,
    ACCELERATOR_LABEL,
    INSTANCE_TYPE_LABEL,
    REGION_LABEL,
)

# ------------------------------------------------------------------------------ taints

# GPU nodes register with this taint and keep it until the GPU health check passes; the health
# check puts it back when the GPUs fail. Only pods that must run on an unproven node tolerate it.
GPU_STARTUP_TAINT_KEY = "supercluster.io/gpu-unhealthy"
GPU_STARTUP_TAINT_VALUE = "true"
GPU_STARTUP_TAINT_EFFECT = "NoSchedule"
# NAT hosts: no workload is scheduled there, kube-proxy (a static unit, not a pod) still runs.
NAT_HOST_TAINT_KEY = "supercluster.io/nat-host"
NAT_HOST_TAINT_VALUE = "true"
NAT_HOST_TAINT_EFFECT = "NoSchedule"
# System pools: only the add-ons that hold cloud identities or watch the whole cluster tolerate it.
SYSTEM_TAINT_KEY = "supercluster.io/system"
SYSTEM_TAINT_VALUE = "true"
SYSTEM_TAINT_EFFECT = "NoSchedule"

# Labels kubelet sets on its own Node whatever its flags (kubernetes.io/docs/reference/labels-annotations-taints:
# kubernetes.io/os, kubernetes.io/arch); every size supercluster knows is x86-64 (infra/catalog/vm_sizes.py).
KUBELET_LABELS = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}

# ------------------------------------------------------------------------------ resources

# On a node agent's DaemonSet: what it gives every node it runs on (infra/cluster/whole_cluster.py reads it).
PROVIDES_ANNOTATION = "supercluster.io/provides"

GPU_RESOURCE = "nvidia.com/gpu"  # the extended resource the NVIDIA device plugin advertises
# The RDMA shared device plugin advertises each InfiniBand node's HCAs as ``rdma/<resourceName>``
# (its resource prefix is "rdma": Mellanox/k8s-rdma-shared-dev-plugin README, "configList").
RDMA_RESOURCE = "rdma/ib"


def node_labels(
    *,
    role: str,
    pool: str | None = None,
    instance_type: str | None = None,
    region: str | None = None,
    infiniband: bool = False,
    infiniband_domain: str | None = None,
    gpus: int = 0,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The labels a node registers with: its role, its pool, where and what it is, GPU facts.

    ``extra`` (a pool's configured ``labels``) may add labels but never change the ones derived
    here (``DERIVED_LABELS``): validation refuses a pool label that names one (infra.config.cluster_config).
    """
    labels = {ROLE_LABEL: role}
    if pool is not None:
        labels[POOL_LABEL] = pool
    if instance_type is not None:
        labels[INSTANCE_TYPE_LABEL] = instance_type
    if region is not None:
        labels[REGION_LABEL] = region
    if infiniband:
        labels[INFINIBAND_LABEL] = "true"
        if infiniband_domain is not None:
            labels[INFINIBAND_DOMAIN_LABEL] = infiniband_domain
    if gpus:
        labels.update({ACCELERATOR_LABEL: ACCELERATOR_VALUE, GPU_PRESENT_LABEL: "true", GPU_COUNT_LABEL: str(gpus)})
    return {**(extra or {}), **labels}


# ------------------------------------------------------------------------------ host users

# The one non-root host user that may reach the metadata service, and only on system pools: the cluster
# autoscaler runs as it (host network) to sign in as its identity. Every other non-root host process is
# refused IMDS and WireServer by the node's output hook (infra/node/cni.py). Outside the ranges Debian and
# Ubuntu allocate to system and login users (adduser.conf: FIRST_SYSTEM_UID 100 to LAST_UID 59999), and not
# nobody (65534).
CLOUD_IDENTITY_UID = 64010
