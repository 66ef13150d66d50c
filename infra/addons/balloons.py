"""Balloon pods: low-priority placeholders that keep a configurable number of warm nodes per pool.

Each balloon asks for most of a node (all of a GPU node's GPUs; half of a CPU node's cores,
which stays below allocatable after kubelet's reservations on every size we know) and
repels other balloons of its pool (one per node). The autoscaler adds nodes until every
balloon runs. When research pods arrive, the scheduler preempts balloons (workloads have a
higher priority and balloons never preempt anyone); the evicted balloons go Pending and
the autoscaler brings the headroom back.

The balloons' priority (-10) is cluster-autoscaler's ``--expendable-pods-priority-cutoff``:
pods *below* the cutoff never trigger a scale-up (cluster-autoscaler FAQ, "How does CA
deal with expendable pods?"), so the balloons sit exactly on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from infra.addons import images, k8s
from infra.addons.base import priority_class
from infra.addons.settings import section
from infra.addons.shared_names import BALLOON_PRIORITY
from infra.config.cluster_config import ClusterConfig, NodePoolConfig
from infra.config.errors import ConfigError
from infra.facts.labels import GPU_RESOURCE, HOSTNAME_LABEL, POOL_LABEL

KEY = "balloons"
NAMESPACE = "balloons"
BALLOON_PRIORITY_VALUE = -10


@dataclass(frozen=True)
class Settings:
    # pool name -> warm nodes kept free for that pool; pools not named get none.
    headroom_nodes: Mapping[str, int] = field(default_factory=dict)


def parse(raw: Mapping[str, Any], config: ClusterConfig) -> Settings:
    s = section(KEY, raw)
    headroom = s.section("headroomNodes", default={})
    pools = {pool.name: pool for pool in config.node_pools}
    result: dict[str, int] = {}
    for name in sorted(headroom.raw, key=str):
        pool = pools.get(name)
        if pool is None:
            raise ConfigError(
                headroom.key(str(name)), headroom.raw[name], "a node pool's name as key: " + ", ".join(pools)
            )
        ceiling = 0 if pool.retired else pool.max_nodes
        accepted = "0 for a retired pool" if pool.retired else f"at most the pool's maxNodes ({pool.max_nodes})"
        count = headroom.integer(name, minimum=0)
        if count > ceiling:
            raise ConfigError(headroom.key(name), count, accepted)
        result[name] = count
    headroom.done()
    s.done()
    return Settings(headroom_nodes=result)


def objects(config: ClusterConfig, settings: Settings) -> list[k8s.Obj]:
    result = [
        k8s.namespace(NAMESPACE, "restricted"),
        priority_class(
            BALLOON_PRIORITY,
            BALLOON_PRIORITY_VALUE,
            "Balloon pods that keep warm nodes; every workload preempts them.",
            preempts=False,
        ),
        k8s.service_account("balloon", NAMESPACE, automount=False),
    ]
    for pool in config.node_pools:
        count = settings.headroom_nodes.get(pool.name, 0)
        if count:
            result.append(_balloons(pool, count))
    return result


def balloon_requests(pool: NodePoolConfig) -> dict[str, Any]:
    if pool.size.gpus:
        return {"cpu": "1", "memory": "1Gi", GPU_RESOURCE: pool.size.gpus}
    return {"cpu": str(pool.size.vcpus // 2), "memory": f"{pool.size.memory_gib // 4}Gi"}


def _balloons(pool: NodePoolConfig, count: int) -> k8s.Obj:
    name = f"balloon-{pool.name}"
    selector = {"app.kubernetes.io/name": name}
    requests = balloon_requests(pool)
    container = {
        "name": "balloon",
        "image": images.PAUSE,
        "resources": {"requests": requests, "limits": requests},
        "securityContext": k8s.locked_down(),
    }
    pod = k8s.pod_spec(
        [container],
        priority_class=BALLOON_PRIORITY,
        service_account="balloon",
        automountServiceAccountToken=False,
        nodeSelector={POOL_LABEL: pool.name},
        # The pool's own taints (team pools included), never the GPU start-up taint: a warm
        # node is a healthy node.
        tolerations=[{"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect} for t in pool.taints],
        affinity={
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": selector}, "topologyKey": HOSTNAME_LABEL}
                ]
            }
        },
        terminationGracePeriodSeconds=0,
        securityContext=dict(k8s.RUNTIME_DEFAULT_SECCOMP),
    )
    # Pending balloons are the point (they make the autoscaler add nodes): Pulumi must not
    # wait for them to become ready.
    return k8s.deployment(name, NAMESPACE, count, pod, selector, app=name, annotations={"pulumi.com/skipAwait": "true"})
