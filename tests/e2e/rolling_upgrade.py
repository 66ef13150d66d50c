"""The box's stand-in for Azure's rolling upgrade of the apiserver scale set (docs/cluster-in-a-box.md).

When a deploy changes the scale set's model (its size or its instances' profile: image, cloud-init, extensions),
Azure rolls it out after the deploy returns, as the rendered ``upgradePolicy.rollingUpgradePolicy`` says: a batch
of ``maxBatchInstancePercent`` of the instances at a time, started only while no more than
``maxUnhealthyInstancePercent`` of them (the batch included) are unhealthy; each upgraded instance must turn
healthy on the scale set's health signal (``maxUnhealthyUpgradedInstancePercent`` 0: one that does not stops the
upgrade), then ``pauseTimeBetweenBatches`` before the next batch. Every number is read from the deploy's plan.

An instance is upgraded as ``lose_and_replace_apiserver`` replaces one (the worst case: no clean shutdown), in
place (a Uniform scale set's upgrade keeps the instance, its name and its address) with the deploy's rendered
files and the new machine image's binaries. ``ApiserverScaleSet.state`` is what ``az`` reports meanwhile,
which the next deploy's upgrade gate reads (``python -m plan --apiserver-rollout``).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.control_plane.scale_set import batch_instances
from tests.e2e.cluster import Cluster
from tests.e2e.faults import (
    ApiserverReplaced,
    BackgroundLoad,
    health_answer,
    health_signal,
    lose_and_replace_apiserver,
)
from tests.e2e.plan_machines import Plan

# The box waits this share of the rendered pause between batches (PT1M: 15 s). The pause lets the load balancer
# take the upgraded instance in and the watches it dropped reconnect; the box also waits for its fleet to renew
# a whole interval without a failure before each batch (``steady``), which is what the pause is for. A quarter
# keeps the scenario (five instances) inside a box hold.
BOX_PAUSE_SHARE = 0.25
HEALTHY_TIMEOUT_S = 120.0  # how long an upgraded instance may take to turn healthy before the box calls it Faulted


def iso_seconds(duration: str) -> float:
    """An ISO 8601 duration as Azure's policies write it (``PT1M``, ``PT90S``, ``PT1H30M``)."""
    match = re.fullmatch(r"PT(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?", duration)
    assert match, f"not an ISO 8601 time duration: {duration}"
    hours, minutes, seconds = (float(part or 0) for part in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def model_changed(before: Plan, after: Plan) -> bool:
    return before.apiserver_model() != after.apiserver_model()


@dataclass
class ApiserverScaleSet:
    """The box's apiserver scale set, as Azure keeps it: its instances (``cluster.control_plane``, created from the
    booted plan's model), the model each runs, and its latest rolling upgrade (``None`` until one ran)."""

    cluster: Cluster
    latest: dict[str, Any] | None = None
    models: dict[str, dict[str, Any]] = field(default_factory=dict)  # the model each instance was created from

    def __post_init__(self) -> None:
        self.models = {m.name: self.cluster.plan.apiserver_model() for m, _, _ in self.cluster.control_plane}

    def behind(self, plan: Plan) -> list[int]:
        """The instances not on ``plan``'s model (by index in the box's control plane)."""
        model = plan.apiserver_model()
        return [i for i, (m, _, _) in enumerate(self.cluster.control_plane) if self.models[m.name] != model]

    def on_model(self, plan: Plan) -> set[str]:
        behind = self.behind(plan)
        return {m.name for i, (m, _, _) in enumerate(self.cluster.control_plane) if i not in behind}

    def state(self, plan: Plan) -> dict[str, Any]:
        """Where it stands against ``plan``'s model, as ``az vmss rolling-upgrade get-latest`` (``latest``) and
        ``az vmss list-instances`` (each instance's ``latestModelApplied``) report it: what a deploy reads."""
        behind = self.behind(plan)
        latest = None
        if self.latest is not None:
            capacity = len(self.cluster.control_plane)
            progress = {
                "successfulInstanceCount": capacity - len(behind),
                "failedInstanceCount": 0,
                "inProgressInstanceCount": 0,
                "pendingInstanceCount": len(behind),
            }
            latest = self.latest | {"progress": progress}
        return {
            "latest": latest,
            "latestModelApplied": [i not in behind for i in range(len(self.cluster.control_plane))],
        }

    def write_state(self, plan: Plan, path: Path) -> Path:
        path.write_text(json.dumps(self.state(plan)))
        return path

    def roll(
        self,
        plan: Plan,
        binaries: Path,
        load: BackgroundLoad,
        before_batch: Callable[[], None],
        after_instance: Callable[[ApiserverReplaced], None],
    ) -> None:
        """Rolls ``plan``'s model out, batch by batch, each instance on ``binaries`` (the model's machine image);
        ``before_batch`` runs before each (the box steady), ``after_instance`` once each upgraded instance is
        healthy."""
        policy = plan.rolling_upgrade_policy()
        capacity = len(self.cluster.control_plane)
        size = batch_instances(policy["maxBatchInstancePercent"], capacity)
        unhealthy_allowed = batch_instances(policy["maxUnhealthyInstancePercent"], capacity)
        pause_s = iso_seconds(policy["pauseTimeBetweenBatches"]) * BOX_PAUSE_SHARE
        model = {m.name: m for m in plan.apiserver_instances()}
        self.latest = {"runningStatus": {"code": "RollingForward", "startTime": time.time()}}
        while behind := self.behind(plan):
            batch = behind[:size]
            before_batch()
            names = {self.cluster.control_plane[i][0].name for i in batch}
            unhealthy = {
                m.name
                for m, _, _ in self.cluster.control_plane
                if health_answer(self.cluster, plan.repair_probe(), m) != 200
            }
            assert len(unhealthy | names) <= unhealthy_allowed, (
                f"Azure would not start a batch of {sorted(names)} with {sorted(unhealthy)} unhealthy ({policy})"
            )
            for index in batch:
                machine = model[self.cluster.control_plane[index][0].name]
                moved = lose_and_replace_apiserver(self.cluster, load, index, machine, binaries)
                self.models[machine.name] = plan.apiserver_model()
                healthy_at = health_signal(self.cluster, machine, healthy=True, timeout=HEALTHY_TIMEOUT_S)
                moved.figures["healthy_s"] = round(healthy_at - moved.lost_at, 1)
                after_instance(moved)
            if self.behind(plan):
                time.sleep(pause_s)
        self.latest = {"runningStatus": self.latest["runningStatus"] | {"code": "Completed"}}
