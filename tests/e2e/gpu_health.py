"""The GPU health check's pod run on a GPU node of the box, with stand-ins for what needs GPUs.

Both containers of the rendered health-check pod run as processes (tests/e2e/pod_processes.py):
``dcgm`` runs the rendered ``gpu_check.sh`` with its rendered environment, ``node-taint`` the rendered
``node_taint.py``, sharing the verdict file at the rendered path, with a token bound to the pod. There
are no GPUs here: ``nvidia-smi``, ``dcgmi`` and ``nv-hostengine`` are stand-ins a test makes pass and
fail (first on the container's ``PATH``). The NVIDIA device plugin is not served by the Go module
proxy: the node's ``nvidia.com/gpu`` capacity is patched onto its status by the harness in its place.
Used by tests/e2e/test_gpu_health.py (dev) and the prod box's one-pod-per-GPU test.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from infra.addons import gpu_health_check
from infra.addons.shared_names import SYSTEM_NAMESPACE
from infra.facts.labels import GPU_RESOURCE, GPU_STARTUP_TAINT_KEY
from tests.e2e import pod_processes
from tests.e2e.cluster import Cluster, Node
from tests.e2e.hosts import Process


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


def has_startup_taint(cluster: Cluster, node: str) -> bool:
    return any(t["key"] == GPU_STARTUP_TAINT_KEY for t in cluster.get_json("node", node)["spec"].get("taints", []))


def advertise_gpus(cluster: Cluster, node: Node, count: int) -> None:
    """What the NVIDIA device plugin would advertise, patched onto the node's status by the harness."""
    capacity = cluster.get_json("node", node.machine.name)["status"].get("capacity", {})
    if capacity.get(GPU_RESOURCE) != str(count):
        patch = json.dumps({"status": {"capacity": {GPU_RESOURCE: str(count)}}})
        cluster.kubectl("patch", "node", node.machine.name, "--subresource=status", "--type=merge", "-p", patch)
