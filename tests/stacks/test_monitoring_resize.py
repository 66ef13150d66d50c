"""Resizing a pool leaves monitoring alone: the node Prometheus shards outlive a deploy that changes the
pools' maxNodes inside what the last deploy's shards hold (infra/addons/monitoring, docs/monitoring.md)."""

from __future__ import annotations

import pytest

from infra.config.errors import ConfigError
from infra.day2.deploy_rules import MONITORING_OUTPUT
from plan.artifacts import kubernetes_object
from plan.runner import own_stack_name, run_program
from plan.stackfile import load_stack_config
from tests.conftest import deploy_after

# A multi-deploy sequence on prod (seconds each).
pytestmark = pytest.mark.slow

CPU_POOL = "nodePools[2]"  # prod's cpu pool, maxNodes 1,480


def _monitoring(run) -> dict[tuple[str, str], dict]:
    objects = (kubernetes_object(r) for r in run.registrations)
    return {
        (o["kind"], o["metadata"]["name"]): o
        for o in objects
        if o is not None and o["metadata"].get("namespace") == "monitoring"
    }


def _prometheus_workloads(run) -> list[str]:
    return sorted(name for kind, name in _monitoring(run) if kind == "StatefulSet" and name.startswith("prometheus-"))


def test_growing_a_pool_by_1000_nodes_changes_no_monitoring_object(prod_plan):
    assert prod_plan.stack == "prod" and prod_plan.outputs[MONITORING_OUTPUT] == {"nodeShards": 13}
    grown = deploy_after(prod_plan, f"{CPU_POOL}.maxNodes=2480")
    assert _monitoring(grown) == _monitoring(prod_plan)
    shrunk = deploy_after(grown, f"{CPU_POOL}.maxNodes=480")
    assert _monitoring(shrunk) == _monitoring(prod_plan)


def test_outgrowing_the_shards_resizes_them_once_with_headroom(prod_plan):
    # prod's address plan caps its pools below what 13 shards hold (9,375 nodes), so the test shrinks the
    # budget instead: 7,500 x 5,200 / 2,900,000 needs 13.4 shards; resized for 9,375 nodes, 17.
    outgrown = deploy_after(prod_plan, "addons.monitoring.seriesPerShard=2900000")
    assert outgrown.outputs[MONITORING_OUTPUT] == {"nodeShards": 17}
    assert len(_prometheus_workloads(outgrown)) == 1 + 17
    again = deploy_after(outgrown, "addons.monitoring.seriesPerShard=2900000", f"{CPU_POOL}.maxNodes=2480")
    assert _monitoring(again) == _monitoring(outgrown)


def test_a_last_deploy_without_the_output_sizes_as_a_first_deploy(prod_plan):
    """A stack deployed before the output existed re-sizes once, with the headroom."""
    previous = {k: v for k, v in prod_plan.outputs.items() if k != MONITORING_OUTPUT}
    run = run_program("prod", load_stack_config("prod", []), {own_stack_name("prod"): previous})
    assert run.outputs[MONITORING_OUTPUT] == {"nodeShards": 13}


def test_a_mistyped_shard_count_in_the_last_outputs_is_one_line(prod_plan):
    previous = {**prod_plan.outputs, MONITORING_OUTPUT: {"nodeShards": "13"}}
    with pytest.raises(ConfigError, match=r"monitoring\.nodeShards.*a whole number"):
        run_program("prod", load_stack_config("prod", []), {own_stack_name("prod"): previous})
