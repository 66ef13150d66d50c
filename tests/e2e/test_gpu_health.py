"""Behaviour 7: the GPU health check's own scripts turn nvidia-smi's and dcgmi's answers into the
node's start-up taint, and a pod asking for a GPU lands only on a node the check cleared.

The dev plan booted (its own cluster). On one GPU node both containers of the rendered health
check pod run as processes (tests/e2e/pod_processes.py): ``dcgm`` runs the rendered
``gpu_check.sh`` with its rendered environment, ``node-taint`` the rendered ``node_taint.py``,
sharing the verdict file at the rendered path, with a token bound to the pod. There are no GPUs
here: ``nvidia-smi``, ``dcgmi`` and ``nv-hostengine`` are stand-ins the test makes pass and fail
(first on the container's ``PATH``). The NVIDIA device plugin is not served by the Go module
proxy: the node's ``nvidia.com/gpu`` capacity is advertised by the harness in its place.
Every link is checked: the stand-ins' answer, the verdict file, the taint, where a GPU pod binds.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
import yaml

from infra.addons import gpu_health_check
from infra.addons.shared_names import SYSTEM_NAMESPACE
from infra.catalog.vm_sizes import VM_SIZES
from infra.facts.labels import GPU_RESOURCE, GPU_STARTUP_TAINT_KEY, ROLE_GPU
from tests.e2e import pod_processes
from tests.e2e.cluster import Cluster, Node
from tests.e2e.hosts import Process, wait_for

pytestmark = pytest.mark.e2e

WAIT = 45  # node-taint reads the verdict every 5 s; the scheduler retries an unschedulable pod within seconds


class StandIns:
    """``nvidia-smi``, ``dcgmi`` and ``nv-hostengine`` answering as the test says: ``gpus`` visible,
    DCGM's diagnostic passing or failing."""

    def __init__(self, folder: Path, gpus: int):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        state = folder / "state"
        state.mkdir(exist_ok=True)
        self.set(gpus=gpus, diag_passes=True)
        scripts = {
            "nvidia-smi": "#!/bin/sh\n"
            '[ "$1" = -L ] || exit 2\n'
            f'i=0; while [ "$i" -lt "$(cat {state}/gpus)" ]; do\n'
            '  echo "GPU $i: NVIDIA stand-in (UUID: GPU-box-$i)"; i=$((i + 1))\ndone\n',
            "dcgmi": "#!/bin/sh\n"
            '[ "$1 $2 $3" = "diag --run 1" ] || exit 2\n'
            f'if [ "$(cat {state}/diag)" = pass ]; then echo "Diagnostic: Pass"; exit 0; fi\n'
            'echo "Deployment: Fail - the stand-in says so"; exit 226\n',
            "nv-hostengine": "#!/bin/sh\nexec sleep 3600\n",
        }
        for name, text in scripts.items():
            (folder / name).write_text(text)
            os.chmod(folder / name, 0o755)

    def set(self, *, gpus: int, diag_passes: bool) -> None:
        (self.folder / "state" / "gpus").write_text(str(gpus))
        (self.folder / "state" / "diag").write_text("pass" if diag_passes else "fail")


class HealthCheckPod:
    """The rendered health-check pod of one GPU node, its containers run as processes."""

    def __init__(self, cluster: Cluster, node: Node, pod: dict, standins: StandIns):
        self.cluster, self.node, self.pod, self.standins = cluster, node, pod, standins
        root = cluster.workdir / "gpu-health" / pod["metadata"]["name"]
        (root / "status").mkdir(parents=True, exist_ok=True)  # the emptyDir the two containers share
        # Each of the pod's volumes, as a folder of the harness.
        self.volumes = {
            "status": root / "status",
            "scripts": pod_processes.write_config_map(
                cluster, gpu_health_check.NAME, SYSTEM_NAMESPACE, root / "scripts"
            ),
            "token": pod_processes.write_service_account(cluster, pod, root / "token"),
        }
        self.dcgm: Process | None = None

    def _start(self, container: str, argv: list[str], env: dict[str, str]) -> Process:
        """The container's volumes bound at its mount paths, ``argv`` run with its environment and ``env``."""
        spec = pod_processes.container(self.pod, container)
        mounts = {self.volumes[m["name"]]: m["mountPath"] for m in spec["volumeMounts"]}
        return pod_processes.start(
            self.cluster,
            self.node,
            f"{gpu_health_check.NAME}-{container}",
            argv,
            mounts,
            {**pod_processes.environment(self.pod, spec), **env},
        )

    @property
    def verdict_file(self) -> Path:
        """Where the dcgm container writes its verdict, seen from the harness."""
        spec = pod_processes.container(self.pod, "dcgm")
        path = pod_processes.environment(self.pod, spec)["STATUS_FILE"]
        (mount,) = [m for m in spec["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
        return self.volumes[mount["name"]] / Path(path).relative_to(mount["mountPath"])

    def start_dcgm(self) -> None:
        """(Re)starts the dcgm container: its first check runs at start (then every rendered interval)."""
        if self.dcgm is not None:
            self.dcgm.stop()
        self.verdict_file.unlink(missing_ok=True)
        command = pod_processes.container(self.pod, "dcgm")["command"]
        self.dcgm = self._start("dcgm", command, {"PATH": f"{self.standins.folder}:{os.environ['PATH']}"})

    def start_node_taint(self) -> Process:
        # The script's own main(), its API address pointed at the apiservers' load balancer: no
        # kube-proxy translates kubernetes.default.svc for these processes.
        program = (
            "import runpy, sys; g = runpy.run_path(sys.argv[1]); "
            "g['main'].__globals__['API'] = sys.argv[2]; g['main']()"
        )
        interpreter, script = pod_processes.container(self.pod, "node-taint")["command"]
        return self._start("node-taint", [interpreter, "-c", program, script, self.cluster.apiserver_url], {})

    def verdict(self) -> str:
        return self.verdict_file.read_text().strip() if self.verdict_file.exists() else ""


def _tainted(cluster: Cluster, node: str) -> bool:
    return any(t["key"] == GPU_STARTUP_TAINT_KEY for t in cluster.get_json("node", node)["spec"].get("taints", []))


def _advertise_gpus(cluster: Cluster, node: Node, count: int) -> None:
    """What the NVIDIA device plugin would advertise, patched onto the node's status by the harness."""
    capacity = cluster.get_json("node", node.machine.name)["status"].get("capacity", {})
    if capacity.get(GPU_RESOURCE) != str(count):
        patch = json.dumps({"status": {"capacity": {GPU_RESOURCE: str(count)}}})
        cluster.kubectl("patch", "node", node.machine.name, "--subresource=status", "--type=merge", "-p", patch)


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
        _advertise_gpus(dev, each, gpus)
    assert _tainted(dev, node.machine.name) and _tainted(dev, other.machine.name), "GPU nodes register tainted"
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
            lambda: _tainted(dev, node.machine.name) == tainted,
            timeout=WAIT,
            on_timeout=dev.describe,
        )
        assert _tainted(dev, other.machine.name), "the other GPU node was never checked: it stays tainted"

    verdict_then_taint("healthy", tainted=False)
    assert _judged(dev, first) == node.machine.name, "the pod lands on the node the check cleared"
    # Its pod slot back (the GPU nodes' pod slots are few, and the DaemonSets hold most).
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
