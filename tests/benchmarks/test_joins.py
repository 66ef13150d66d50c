"""The join-burst pattern: the pacing it applies is the rendered one, the order alternates, the table."""

from __future__ import annotations

import pytest

from benchmarks.scale import joins
from infra.addons import cluster_autoscaler
from infra.control_plane import flowcontrol
from infra.control_plane.cluster_objects import cluster_objects
from tests.infra.addon_fixtures import all_objects, groups_for, spec_for


def _prod_objects() -> list[dict]:
    """What prod's files/k8s holds: the add-ons and the cluster's own objects."""
    return [*all_objects(groups_for("prod")), *cluster_objects(spec_for("prod").config)]


def test_the_benchmark_paces_joins_as_the_rendered_autoscaler_does():
    pacing = joins.rendered_pacing(_prod_objects())
    per_loop = cluster_autoscaler.Settings().max_nodes_per_scaleup
    assert pacing == joins.Pacing(per_loop, cluster_autoscaler.SCAN_INTERVAL_SECONDS)
    # A loop's worth at once, then a loop's worth per scan interval.
    assert pacing.fleet_flags() == [
        f"--register-qps={per_loop / cluster_autoscaler.SCAN_INTERVAL_SECONDS:g}",
        f"--register-burst={per_loop}",
    ]


def test_the_pacing_follows_the_setting():
    objects = [*all_objects(groups_for("prod", addons={"clusterAutoscaler": {"maxNodesPerScaleUp": 50}}))]
    assert joins.rendered_pacing(objects).fleet_flags() == ["--register-qps=5", "--register-burst=50"]


def test_without_the_rendered_autoscaler_there_is_no_pacing_to_measure():
    objects = [o for o in _prod_objects() if o["metadata"]["name"] != cluster_autoscaler.NAME]
    with pytest.raises(LookupError, match=cluster_autoscaler.NAME):
        joins.rendered_pacing(objects)


def test_the_join_level_is_the_rendered_schema_and_level():
    found = joins.join_level(_prod_objects())
    assert sorted(d["kind"] for d in found) == ["FlowSchema", "PriorityLevelConfiguration"]
    assert {d["metadata"]["name"] for d in found} == {flowcontrol.JOIN_LEVEL}
    with pytest.raises(LookupError):
        joins.join_level([o for o in _prod_objects() if o["kind"] != "FlowSchema"])


def test_modes_alternate_from_the_first():
    assert joins.order(joins.PACED, 3) == ["paced", "unpaced", "paced"]
    assert joins.order(joins.UNPACED, 6) == ["unpaced", "paced"] * 3


def _run(mode: str, join: float, lease: float, throttled: int = 0) -> dict:
    return {
        "mode": mode,
        "nodes_before": 1000,
        "burst": 300,
        "registration": {"p99": join},
        "lease_update_p99_s": lease,
        "node_high_wait_p99_s": None,
        "http_429": throttled,
        "settle": {"seconds": 90, "settled": mode == "paced"},
        "load_1m": 9.5,
    }


def test_the_table_has_every_run_then_each_mode_s_median_and_range():
    runs = [_run("paced", 1.0, 0.2), _run("unpaced", 2.0, 0.5, 3), _run("paced", 3.0, 0.4), _run("paced", 8.0, 0.3)]
    del runs[-1]["settle"]  # --join-settle between: the last burst's cluster is not waited for
    table = joins.render(runs)
    assert "| 4 | paced | 1,000 | 300 | 8.000 s | 0.300 s | n/a | 0 | not waited | 9.5 |" in table
    assert "| 2 | unpaced | 1,000 | 300 | 2.000 s | 0.500 s | n/a | 3 | 90 s (**not** settled) | 9.5 |" in table
    assert "| paced | 3 | 3 (1-8) | 0.3 (0.2-0.4) | n/a | 0 (0-0) |" in table
    assert "| unpaced | 1 | 2 (one run) | 0.5 (one run) | n/a | 3 (one run) |" in table


def test_the_plots_draw_each_mode_s_median_run():
    runs = [_run("paced", 1.0, 0.2), _run("paced", 3.0, 0.4), _run("paced", 2.0, 0.9), _run("unpaced", 2.0, 0.5)]
    assert joins.median_run(runs, "paced")["lease_update_p99_s"] == 0.4
    assert joins.median_run(runs, "unpaced")["lease_update_p99_s"] == 0.5
    assert joins.median_run([], "paced") is None
