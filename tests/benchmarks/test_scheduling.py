"""The scheduler benchmark's arithmetic: nodes scored per pod, the config variants, packing, the table."""

from __future__ import annotations

import pytest

from benchmarks.scale import scheduling
from infra.control_plane import scheduler


@pytest.mark.parametrize(
    ("nodes", "percentage", "scored"),
    [
        (50, 10, 50),  # below 100 nodes: all of them
        (1000, 100, 1000),
        (1000, 0, 420),  # adaptive: 50 - 1000/125 = 42 %
        (2500, 0, 750),  # 30 %
        (7500, 0, 375),  # 50 - 60 < 5: the 5 % floor
        (7500, 20, 1500),
        (400, 10, 100),  # never fewer than 100
    ],
)
def test_nodes_scored_follows_the_scheduler(nodes, percentage, scored):
    assert scheduling.nodes_scored(nodes, percentage) == scored


def test_a_variant_changes_only_the_percentage_and_leader_election():
    rendered = scheduler.scheduler_config()
    config = scheduling.variant(rendered, 20)
    assert config["percentageOfNodesToScore"] == 20
    assert config["leaderElection"]["leaderElect"] is False
    assert {k: v for k, v in config.items() if k not in ("percentageOfNodesToScore", "leaderElection")} == {
        k: v for k, v in rendered.items() if k not in ("percentageOfNodesToScore", "leaderElection")
    }
    assert rendered["leaderElection"]["leaderElect"] is True  # the rendered one is untouched


def test_fewest_nodes_is_bound_by_the_scarcest_resource_and_max_pods():
    cpu_node = {"cpu": 64, "memory": 256 * 2**30, "pods": 110}
    assert scheduling.fewest_nodes(1000, {"cpu": 1, "memory": 2 * 2**30}, cpu_node) == 16  # 64 a node
    assert scheduling.fewest_nodes(1000, {"cpu": 0.5}, cpu_node) == 10  # 110 pods a node, not 128
    gpu_node = {"cpu": 96, "memory": 1900 * 2**30, "pods": 110, "nvidia.com/gpu": 8}
    assert scheduling.fewest_nodes(1000, {"nvidia.com/gpu": 1, "cpu": 1}, gpu_node) == 125


def test_packing_counts_distinct_nodes():
    assert scheduling.packing(["a", "a", "b", "c"], 2) == {"nodes_used": 3, "fewest_nodes": 2, "packing_ratio": 1.5}


@pytest.mark.parametrize(("text", "value"), [("64", 64.0), ("500m", 0.5), ("256Gi", 256 * 2**30), ("8", 8.0)])
def test_quantities(text, value):
    assert scheduling.quantity(text) == value


def test_table_has_a_row_per_run_with_its_load():
    row = {
        "nodes": 2500,
        "percentage": 0,
        "nodes_scored": 750,
        "feasible_nodes": 2000,
        "burst": "gang of 1000",
        "pods_per_s": 41.5,
        "sli_p99_s": 12.3,
        "nodes_used": 130,
        "fewest_nodes": 125,
        "packing_ratio": 1.04,
        "load_average": 7.2,
    }
    text = scheduling.table([row, {**row, "sli_p99_s": None}])
    assert "| 2,500 | 0 | 750 of 2,000 | gang of 1000 | 41.5 | 12.30 s | 130 / 125 (1.04x) | 7.2 |" in text
    assert "| n/a |" in text


def _apply(node: dict, patch: list[dict]) -> dict | None:
    """RFC 6902's test and remove on ``/spec/taints/<i>`` (what the apiserver does): None if a test fails."""
    taints = list(node["spec"]["taints"])
    for op in patch:
        index = int(op["path"].split("/")[3])
        if op["op"] == "test" and (index >= len(taints) or taints[index]["key"] != op["value"]):
            return None
        if op["op"] == "remove":
            del taints[index]
    return {"spec": {"taints": taints}}


def test_lifting_the_not_ready_taint_keeps_the_pools_own_and_refuses_any_other_layout():
    gpu_taint = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
    not_ready = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
    gpu, cpu = scheduling.lift_taint([("gpu-0", 1), ("cpu-0", 0)], not_ready["key"])
    assert gpu["path"] == "/api/v1/nodes/gpu-0" and cpu["path"] == "/api/v1/nodes/cpu-0"
    # Admission appends the not-ready taint after the node's own.
    assert _apply({"spec": {"taints": [gpu_taint, not_ready]}}, gpu["patch"]) == {"spec": {"taints": [gpu_taint]}}
    assert _apply({"spec": {"taints": [not_ready]}}, cpu["patch"]) == {"spec": {"taints": []}}
    # Anywhere else, the node is left as it is.
    assert _apply({"spec": {"taints": [not_ready, gpu_taint]}}, gpu["patch"]) is None
    assert _apply({"spec": {"taints": [gpu_taint]}}, gpu["patch"]) is None
