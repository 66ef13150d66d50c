"""Behaviour 7: the GPU health check's own scripts turn nvidia-smi's and dcgmi's answers into the
node's start-up taint, and a pod asking for a GPU lands only on a node the check cleared.

The dev plan booted (its own cluster). On one GPU node the rendered health check pod runs as
processes against stand-ins for ``nvidia-smi`` and ``dcgmi`` that the test makes pass and fail, and the
node's ``nvidia.com/gpu`` is advertised by the harness (tests/e2e/gpu_health.py says how and why).
Every link is checked: the stand-ins' answer, the verdict file, the taint, where a GPU pod binds.
"""

from __future__ import annotations

import uuid

import pytest
import yaml

from infra.addons import gpu_health_check
from infra.addons.shared_names import SYSTEM_NAMESPACE
from infra.catalog.vm_sizes import VM_SIZES
from infra.facts.labels import GPU_RESOURCE, GPU_STARTUP_TAINT_KEY, ROLE_GPU
from tests.e2e import pod_processes
from tests.e2e.cluster import Cluster
from tests.e2e.gpu_health import HealthCheckPod, StandIns, advertise_gpus, has_startup_taint
from tests.e2e.hosts import wait_for

pytestmark = pytest.mark.e2e

WAIT = 45  # node-taint reads the verdict every 5 s; the scheduler retries an unschedulable pod within seconds


def _gpu_pod(cluster: Cluster, name: str, tolerate: list[dict]) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"limits": {GPU_RESOURCE: "1"}},
                }
            ],
            "tolerations": tolerate,
        },
    }
    cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(pod))


def _placement(cluster: Cluster, name: str) -> str:
    """The pod's node, or why the scheduler found none (its PodScheduled message)."""
    pod = cluster.get_json("pod", name, "-n", "default")
    if pod["spec"].get("nodeName"):
        return pod["spec"]["nodeName"]
    conditions = {c["type"]: c for c in pod["status"].get("conditions", [])}
    scheduled = conditions.get("PodScheduled", {})
    assert scheduled.get("reason") == "Unschedulable", f"{name} is not yet judged: {pod['status']}"
    return scheduled["message"]


def _judged(cluster: Cluster, name: str) -> str:
    return wait_for(f"{name} to be bound or judged unschedulable", lambda: _placement(cluster, name), timeout=WAIT)


def _waits_for_the_check(cluster: Cluster, name: str) -> None:
    """The pod is unschedulable, and the start-up taint is why (not a full node)."""
    message = _judged(cluster, name)
    assert GPU_STARTUP_TAINT_KEY in message, message


def test_a_gpu_pod_lands_only_on_a_node_whose_gpus_the_check_cleared(dev: Cluster):
    gpu_pools = [p.name for p in dev.spec.config.node_pools if p.role == ROLE_GPU]
    gpu_nodes = [n for n in dev.nodes if n.pool in gpu_pools]
    assert len(gpu_nodes) >= 2, "the dev box joins at least two GPU nodes"
    node, other = gpu_nodes[0], gpu_nodes[1]
    gpus = VM_SIZES[dev.spec.config.pool(node.pool).vm_size].gpus
    for each in gpu_nodes:
        advertise_gpus(dev, each, gpus)
    assert has_startup_taint(dev, node.machine.name) and has_startup_taint(dev, other.machine.name), (
        "GPU nodes register tainted"
    )
    tolerate = [
        {"key": t["key"], "operator": "Exists", "effect": t["effect"]}
        for t in dev.get_json("node", node.machine.name)["spec"]["taints"]
        if t["key"] != GPU_STARTUP_TAINT_KEY
    ]
    first, second = (f"wants-gpu-{uuid.uuid4().hex[:6]}" for _ in range(2))
    _gpu_pod(dev, first, tolerate)
    _waits_for_the_check(dev, first)  # no GPU node is cleared yet

    selector = f"app.kubernetes.io/name={gpu_health_check.NAME}-{node.pool}"
    pod = pod_processes.bound_pod(dev, SYSTEM_NAMESPACE, selector=selector, node=node.machine.name)
    standins = StandIns(dev.workdir / "gpu-health" / "stand-ins", gpus)
    check = HealthCheckPod(dev, node, pod, standins)
    check.start_node_taint()

    def verdict_then_taint(verdict_starts: str, tainted: bool) -> None:
        check.start_dcgm()
        wait_for(f"the verdict {verdict_starts!r}", lambda: check.verdict().startswith(verdict_starts), timeout=WAIT)
        wait_for(
            f"{node.machine.name} {'tainted' if tainted else 'untainted'}",
            lambda: has_startup_taint(dev, node.machine.name) == tainted,
            timeout=WAIT,
            on_timeout=dev.describe,
        )
        assert has_startup_taint(dev, other.machine.name), "the other GPU node was never checked: it stays tainted"

    verdict_then_taint("healthy", tainted=False)
    assert _judged(dev, first) == node.machine.name, "the pod lands on the node the check cleared"
    # Gone before the second pod, so that where the second binds depends on the check alone.
    dev.kubectl("delete", "pod", first, "-n", "default", "--grace-period=0", "--force")

    standins.set(gpus=gpus - 1, diag_passes=True)
    verdict_then_taint(f"unhealthy: {gpus - 1} of {gpus} GPUs visible", tainted=True)
    _gpu_pod(dev, second, tolerate)
    _waits_for_the_check(dev, second)  # a node whose check fails takes no new GPU pod

    standins.set(gpus=gpus, diag_passes=False)
    verdict_then_taint("unhealthy: dcgmi diag --run 1 failed: Deployment: Fail", tainted=True)
    _waits_for_the_check(dev, second)

    standins.set(gpus=gpus, diag_passes=True)
    verdict_then_taint("healthy", tainted=False)
    bound = wait_for("the waiting pod to bind", lambda: _placement(dev, second) == node.machine.name, timeout=WAIT)
    assert bound
