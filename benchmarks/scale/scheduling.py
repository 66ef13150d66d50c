"""The scheduler benchmark's arithmetic: the config variants, how many nodes the scheduler scores,
packing quality, the table. Pure functions; tested in tests/benchmarks/test_scheduling.py."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping
from typing import Any

# kube-scheduler's numFeasibleNodesToFind (pkg/scheduler/schedule_one.go): below 100 nodes, or at
# 100 %, every node; a percentage of 0 is adaptive, 50 % minus one point per 125 nodes, at least
# 5 %; whatever the percentage, at least 100 nodes.
MIN_FEASIBLE_NODES = 100
MIN_ADAPTIVE_PERCENTAGE = 5
ADAPTIVE_BASE_PERCENTAGE = 50
ADAPTIVE_NODES_PER_POINT = 125


def nodes_scored(nodes: int, percentage: int) -> int:
    """How many feasible nodes the scheduler looks for (and scores) per pod, out of ``nodes``."""
    if nodes < MIN_FEASIBLE_NODES or percentage >= 100:
        return nodes
    if percentage == 0:
        percentage = max(ADAPTIVE_BASE_PERCENTAGE - nodes // ADAPTIVE_NODES_PER_POINT, MIN_ADAPTIVE_PERCENTAGE)
    return max(nodes * percentage // 100, MIN_FEASIBLE_NODES)


def variant(rendered: Mapping[str, Any], percentage: int) -> dict[str, Any]:
    """The rendered KubeSchedulerConfiguration with one change, ``percentageOfNodesToScore``, and one
    harness substitution: no leader election (the benchmark runs one scheduler, started fresh for each
    variant, and must not wait out the previous one's lease)."""
    config = copy.deepcopy(dict(rendered))
    config["percentageOfNodesToScore"] = percentage
    config["leaderElection"] = {**config["leaderElection"], "leaderElect": False}
    return config


def fewest_nodes(pods: int, request: Mapping[str, float], allocatable: Mapping[str, float]) -> int:
    """The fewest identical nodes that can hold ``pods`` pods of ``request`` each (pods counted too)."""
    per_node = min(
        int(allocatable["pods"]),
        *(int(allocatable[resource] // amount) for resource, amount in request.items() if amount),
    )
    return math.ceil(pods / per_node)


def packing(bound_to: Iterable[str], fewest: int) -> dict[str, Any]:
    """Nodes a burst landed on against the fewest possible (1.0: packed perfectly)."""
    used = len(set(bound_to))
    return {"nodes_used": used, "fewest_nodes": fewest, "packing_ratio": round(used / fewest, 2) if fewest else None}


def lift_taint(nodes: Iterable[tuple[str, int]], key: str) -> list[dict[str, Any]]:
    """JSON patches that remove taint ``key`` from each ``(node, taints it registered with)``: admission
    appends it after the node's own taints, and the patch tests the key there first, so a node whose
    taints are not as expected is refused (422), never changed."""
    return [
        {
            "path": f"/api/v1/nodes/{name}",
            "patch": [
                {"op": "test", "path": f"/spec/taints/{index}/key", "value": key},
                {"op": "remove", "path": f"/spec/taints/{index}"},
            ],
        }
        for name, index in nodes
    ]


def quantity(value: str) -> float:
    """A Kubernetes quantity of the forms the benchmark's pools use: ``64``, ``500m``, ``256Gi``."""
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    for suffix, factor in units.items():
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * factor
    return float(value)


def table(rows: list[Mapping[str, Any]]) -> str:
    """One markdown row per (nodes, percentage, burst)."""
    lines = [
        "| nodes | percentageOfNodesToScore | nodes scored per pod (of feasible) | burst | pods/s | "
        "scheduling SLI p99 | nodes used / fewest | load average (1 min) |",
        "|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        p99 = row.get("sli_p99_s")
        lines.append(
            f"| {row['nodes']:,} | {row['percentage']} | {row['nodes_scored']:,} of {row['feasible_nodes']:,} | "
            f"{row['burst']} | "
            f"{row['pods_per_s']} | {'n/a' if p99 is None else f'{p99:.2f} s'} | "
            f"{row['nodes_used']} / {row['fewest_nodes']} ({row['packing_ratio']}x) | {row['load_average']} |"
        )
    return "\n".join(lines) + "\n"
