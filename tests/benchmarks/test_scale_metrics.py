"""The scale proof's arithmetic: Prometheus text parsing, counter and histogram deltas, quantiles."""

from __future__ import annotations

import pytest

from benchmarks.scale import metrics
from benchmarks.scale.report import heap_slope, render

BEFORE = """
# HELP apiserver_request_duration_seconds x
apiserver_request_duration_seconds_bucket{verb="PUT",resource="leases",scope="namespace",le="0.05"} 10
apiserver_request_duration_seconds_bucket{verb="PUT",resource="leases",scope="namespace",le="0.1"} 10
apiserver_request_duration_seconds_bucket{verb="PUT",resource="leases",scope="namespace",le="1"} 10
apiserver_request_duration_seconds_bucket{verb="PUT",resource="leases",scope="namespace",le="+Inf"} 10
apiserver_request_total{code="200",verb="PUT"} 10
apiserver_request_total{code="429",verb="LIST"} 1
process_resident_memory_bytes 1.073741824e+09
"""
AFTER = """
apiserver_request_duration_seconds_bucket{verb="PUT",resource="leases",scope="namespace",le="0.05"} 60
apiserver_request_duration_seconds_bucket{verb="PUT",resource="leases",scope="namespace",le="0.1"} 100
apiserver_request_duration_seconds_bucket{verb="PUT",resource="leases",scope="namespace",le="1"} 110
apiserver_request_duration_seconds_bucket{verb="PUT",resource="leases",scope="namespace",le="+Inf"} 110
apiserver_request_total{code="200",verb="PUT"} 110
apiserver_request_total{code="429",verb="LIST"} 4
process_resident_memory_bytes 2.147483648e+09
"""


def test_counters_and_gauges_read_the_window_between_two_scrapes():
    before, after = metrics.parse(BEFORE), metrics.parse(AFTER)
    assert metrics.counter_delta(before, after, "apiserver_request_total") == 103
    assert metrics.counter_delta(before, after, "apiserver_request_total", lambda labels: labels["code"] == "429") == 3
    assert metrics.gauge(after, "process_resident_memory_bytes") == 2**31


def test_histogram_quantile_interpolates_inside_the_bucket_of_the_window():
    buckets = metrics.histogram_delta(metrics.parse(BEFORE), metrics.parse(AFTER), "apiserver_request_duration_seconds")
    assert buckets == [(0.05, 50), (0.1, 90), (1.0, 100), (float("inf"), 100)]
    assert metrics.quantile(0.5, buckets) == pytest.approx(0.05)  # the 50th of 100 is the first bucket's last
    assert metrics.quantile(0.99, buckets) == pytest.approx(0.1 + 0.9 * 9 / 10)
    assert metrics.quantile(0.99, []) is None


def test_samples_of_several_components_add_up():
    both = metrics.combine([metrics.parse(AFTER), metrics.parse(AFTER)])
    assert metrics.gauge(both, "process_resident_memory_bytes") == 2**32


def test_quantile_in_the_infinite_bucket_is_the_highest_finite_bound():
    assert metrics.quantile(0.99, [(0.1, 1), (1.0, 1), (float("inf"), 100)]) == 1.0


def _step(**changes) -> dict:
    """One growth step's figures, as the scale proof records them."""
    return {
        "nodes": 1000,
        "registration": {"p99": 0.2},
        "lease_update_p99_s": 1.5,
        "worst_mutating": ("PUT leases", 1.5),
        "worst_get": ("GET nodes", 0.01),
        "worst_cluster_list": ("LIST pods", 0.2),
        "http_429": 0,
        "requests_per_s": 100.0,
        "apiserver_heap_gib_mean": 1.0,
        "etcd_db_mib": 10.0,
        "etcd_commit_p99_ms": 5.0,
        "main_etcd_puts_per_s": 100.0,
        "cores_busy": {"kube-apiserver": 1.2, "etcd": 0.4, "fleet": 0.1},
        **changes,
    }


def test_the_report_compares_each_figure_with_its_slo():
    step = _step()
    table = render({"machine": "2 cores", "steps": [step, {**step, "nodes": 3000, "apiserver_heap_gib_mean": 2.0}]})
    assert "1.500 s (**over**)" in table
    assert "kube-apiserver 1.20, etcd 0.40, fleet 0.10" in table
    assert heap_slope([step, {**step, "nodes": 3000, "apiserver_heap_gib_mean": 2.0}]) == pytest.approx(0.5)


def test_watches_are_counted_per_resource_from_the_long_running_requests_gauge():
    snapshot = metrics.parse(
        'apiserver_longrunning_requests{component="apiserver",resource="pods",scope="cluster",verb="WATCH"} 40\n'
        'apiserver_longrunning_requests{component="apiserver",resource="pods",scope="namespace",verb="WATCH"} 2\n'
        'apiserver_longrunning_requests{component="apiserver",resource="secrets",scope="namespace",verb="WATCH"} 7\n'
        'apiserver_longrunning_requests{component="apiserver",resource="pods",scope="namespace",verb="CONNECT"} 3\n'
        'apiserver_longrunning_requests{component="apiserver",resource="nodes",scope="cluster",verb="WATCH"} 0\n'
    )
    assert metrics.watches_by_resource(snapshot) == {"pods": 42, "secrets": 7}


def test_the_growth_table_names_the_watches_per_apiserver():
    step = _step(
        watchers_per_apiserver=[1000, 1200, 1400],
        watchers_by_resource={"pods": 1300, "nodes": 1100, "services": 1000, "secrets": 200, "leases": 1},
    )
    table = render({"machine": "2 cores", "steps": [step]})
    assert "| 1,200 (1,000-1,400): pods 1,300, nodes 1,100, services 1,000, secrets 200 in all |" in table
