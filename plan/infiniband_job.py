"""A researcher's multi-node job over InfiniBand: the objects that keep it whole and inside one domain.

InfiniBand connects only the VMs of one scale set (an InfiniBand domain, at most 100 VMs:
``infra.facts.labels.INFINIBAND_DOMAIN_LABEL``). A job whose ranks land in two domains cannot use the
fabric between them, and a job that starts some ranks and waits for the rest holds GPUs idle. So a
job is:

- a ``PodGroup`` with ``minMember`` = its nodes, and pods on the ``gang-scheduler`` profile
  (Coscheduling): the scheduler binds all of them or none;
- a required pod affinity to its own pods on ``INFINIBAND_DOMAIN_LABEL``: once the first rank is
  placed in a domain, every other rank must be placed in the same one;
- an Indexed Job with a headless Service, so rank ``i`` is reachable as ``<job>-<i>.<job>``
  (rank 0 is the rendezvous address), one rank per node, each with all the node's GPUs and its
  InfiniBand HCAs (``infra.facts.labels.RDMA_RESOURCE``, from the RDMA device plugin);
- the NCCL settings Azure documents for the ND H100 v5 sizes (``NCCL_ENV``);
- the NUMA seccomp profile every node carries (``infra.node.seccomp.NUMA_PROFILE``): under the runtime's
  default, which kubelet applies to a pod that names none, the ranks' memory binding to the GPUs' and
  HCAs' NUMA nodes (``mbind``, ``set_mempolicy``) is refused.

``python -m plan.job --stack prod --pool h100a --name my-run --namespace team-a --nodes 4
--image <image> -- <command ...>`` prints the manifest (docs/infiniband-jobs.md). Pure: no cluster access.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from infra.config.cluster_config import NodePoolConfig
from infra.config.sizing import MAX_VMS_PER_PLACEMENT_GROUP
from infra.control_plane.cluster_objects import POD_GROUP_API_GROUP
from infra.control_plane.scheduler import GANG_PROFILE, POD_GROUP_LABEL
from infra.facts.labels import GPU_RESOURCE, INFINIBAND_DOMAIN_LABEL, POOL_LABEL, RDMA_RESOURCE
from infra.node.seccomp import NUMA_PROFILE

Obj = dict[str, Any]

# The NCCL settings Microsoft's ND H100 v5 examples set (alongside NCCL_TOPO_FILE, below): bootstrap
# sockets on the VM's Ethernet NIC (eth0; InfiniBand carries the data), PCI relaxed ordering on the
# HCAs (the VM is virtualised), GPUs numbered in PCI bus order as the topology file numbers them, and
# GPUDirect RDMA at every distance (level 5, SYS) so no transfer bounces through host memory.
# Names and values: NCCL's environment-variable reference (docs.nvidia.com/deeplearning/nccl).
NCCL_ENV = {
    "NCCL_SOCKET_IFNAME": "eth0",
    "NCCL_IB_PCI_RELAXED_ORDERING": "1",
    "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    "NCCL_NET_GDR_LEVEL": "5",
}
# The Azure HPC image ships the VM's PCI topology at /opt/microsoft/ndv5-topo.xml (Azure/azhpc-images,
# topology/ndv5-topo.xml), which NCCL cannot discover by itself inside a VM. Pods may not mount
# host paths (Pod Security baseline), so a team publishes it once as this ConfigMap
# (docs/infiniband-jobs.md); the mount is optional: without it NCCL warns and detects the topology itself.
TOPOLOGY_CONFIG_MAP = "nccl-topology"
TOPOLOGY_FILE = "ndv5-topo.xml"
TOPOLOGY_DIR = "/etc/nccl-topology"
RENDEZVOUS_PORT = 29500  # torchrun's default --master-port


def infiniband_job(
    *, name: str, namespace: str, pool: NodePoolConfig, nodes: int, image: str, command: Sequence[str]
) -> list[Obj]:
    """The PodGroup, headless Service and Indexed Job of one gang-scheduled job on ``pool``'s nodes."""
    if not pool.infiniband:
        raise ValueError(f"pool {pool.name} has no InfiniBand (nodePools[].infiniband is false)")
    if not 1 <= nodes <= MAX_VMS_PER_PLACEMENT_GROUP:
        raise ValueError(
            f"nodes {nodes}: expected 1 to {MAX_VMS_PER_PLACEMENT_GROUP}, the most VMs one "
            "InfiniBand domain (a single-placement-group scale set) holds"
        )
    group = {POD_GROUP_LABEL: name}
    limits = {GPU_RESOURCE: pool.size.gpus, RDMA_RESOURCE: 1}
    env = [{"name": key, "value": value} for key, value in NCCL_ENV.items()] + [
        {"name": "NCCL_TOPO_FILE", "value": f"{TOPOLOGY_DIR}/{TOPOLOGY_FILE}"},
        {"name": "MASTER_ADDR", "value": f"{name}-0.{name}.{namespace}.svc"},
        {"name": "MASTER_PORT", "value": str(RENDEZVOUS_PORT)},
        {"name": "NNODES", "value": str(nodes)},
        {
            "name": "NODE_RANK",
            "valueFrom": {
                "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
            },
        },
    ]
    pod = {
        "schedulerName": GANG_PROFILE,
        "subdomain": name,
        "restartPolicy": "Never",
        "securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": NUMA_PROFILE}},
        "nodeSelector": {POOL_LABEL: pool.name},
        "tolerations": [{"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect} for t in pool.taints],
        "affinity": {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": dict(group)},
                        "topologyKey": INFINIBAND_DOMAIN_LABEL,
                    }
                ]
            }
        },
        "containers": [
            {
                "name": "rank",
                "image": image,
                "command": list(command),
                "env": env,
                "ports": [{"containerPort": RENDEZVOUS_PORT, "name": "rendezvous"}],
                "resources": {"limits": dict(limits), "requests": dict(limits)},
                "volumeMounts": [
                    {"name": "shm", "mountPath": "/dev/shm"},
                    {"name": "topology", "mountPath": TOPOLOGY_DIR, "readOnly": True},
                ],
            }
        ],
        "volumes": [
            # NCCL's shared-memory transport between the GPUs of one node outgrows the 64 MiB default.
            {"name": "shm", "emptyDir": {"medium": "Memory"}},
            {"name": "topology", "configMap": {"name": TOPOLOGY_CONFIG_MAP, "optional": True}},
        ],
    }
    meta = {"name": name, "namespace": namespace, "labels": dict(group)}
    return [
        {
            "apiVersion": f"{POD_GROUP_API_GROUP}/v1alpha1",
            "kind": "PodGroup",
            "metadata": dict(meta),
            "spec": {"minMember": nodes},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": dict(meta),
            "spec": {
                "clusterIP": "None",
                "selector": dict(group),
                "publishNotReadyAddresses": True,
                "ports": [{"name": "rendezvous", "port": RENDEZVOUS_PORT}],
            },
        },
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": dict(meta),
            "spec": {
                "completionMode": "Indexed",
                "completions": nodes,
                "parallelism": nodes,
                # One failed rank fails the run: a gang is restarted whole, by the researcher.
                "backoffLimit": 0,
                "template": {"metadata": {"labels": dict(group)}, "spec": pod},
            },
        },
    ]
