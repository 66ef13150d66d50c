"""What every add-on stands on, rendered whatever is enabled: priority classes and the GPU runtime class.

Priorities (higher preempts lower):
- ``supercluster-system`` (1,000,000): platform services that are not node agents (Prometheus).
- ``supercluster-workloads`` (1,000, the global default): every research pod that names no class,
  so a research pod always preempts a balloon.
- ``supercluster-balloons`` (-10): placeholder pods that keep warm nodes (see balloons.py).
Node agents and DNS use the built-in ``system-node-critical`` / ``system-cluster-critical``.
"""

from __future__ import annotations

from infra.addons import k8s
from infra.addons.shared_names import NVIDIA_RUNTIME_CLASS, SYSTEM_PRIORITY, WORKLOAD_PRIORITY
from infra.config.cluster_config import ClusterConfig
from infra.facts.labels import ROLE_GPU, ROLE_LABEL

SYSTEM_PRIORITY_VALUE = 1_000_000
WORKLOAD_PRIORITY_VALUE = 1_000


def priority_class(
    name: str, value: int, description: str, *, global_default: bool = False, preempts: bool = True
) -> k8s.Obj:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": k8s.metadata(name),
        "value": value,
        "globalDefault": global_default,
        "preemptionPolicy": "PreemptLowerPriority" if preempts else "Never",
        "description": description,
    }


def objects(config: ClusterConfig) -> list[k8s.Obj]:
    result = [
        priority_class(
            SYSTEM_PRIORITY, SYSTEM_PRIORITY_VALUE, "Platform services that are not per-node agents (monitoring)."
        ),
        priority_class(
            WORKLOAD_PRIORITY,
            WORKLOAD_PRIORITY_VALUE,
            "Research workloads; the default for every pod that names no class.",
            global_default=True,
        ),
    ]
    if any(pool.role == ROLE_GPU for pool in config.node_pools):
        # Pods that ask for the NVIDIA runtime can only land on GPU nodes.
        result.append(
            {
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": k8s.metadata(NVIDIA_RUNTIME_CLASS),
                "handler": NVIDIA_RUNTIME_CLASS,
                "scheduling": {"nodeSelector": {ROLE_LABEL: ROLE_GPU}},
            }
        )
    return result
