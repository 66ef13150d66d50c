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
# Where Prometheus runs (its nodeSelector) and so the only pools whose subnets reach etcd's plain-HTTP
# metrics port (infra/network_security.py): one fact, read by both.
MONITORING_ROLE = ROLE_CPU
ROLE_NAT_HOST = roles.NAT_HOST.machine  # a NAT host: a tainted node that runs kube-proxy for the service range
POOL_ROLES = roles.POOL_ROLES

POOL_LABEL = "supercluster.io/pool"  # the node pool's name
INFINIBAND_LABEL = "supercluster.io/infiniband"  # "true" on nodes of InfiniBand pools
# The InfiniBand domain a node is in: the shard (scale set) it belongs to. InfiniBand connects only the
# VMs of one scale set with a single placement group, at most 100 VMs (infra/sizing.py), so the pods of a
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

# ------------------------------------------------------------------------------ resources

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
    here (``DERIVED_LABELS``): validation refuses a pool label that names one (infra.config).
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
