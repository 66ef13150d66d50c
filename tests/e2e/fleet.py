"""The simulated fleet (``fleet``, tests/e2e/go/kubernetes/cmd/fleet) grown against a booted box.

The scale proof (benchmarks/scale_proof.py) grows it step by step to find where this machine
saturates; the fault suite (tests/e2e/test_faults.py) holds a fleet well below that as its
background load. Each node is registered with a prod pool's rendered labels, taints and capacity and
renews its Lease at kubelet's cadence; its requests are made as that node (impersonated), so API
Priority and Fairness queues them as a kubelet's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infra.catalog.vm_sizes import VM_SIZES
from infra.facts.labels import GPU_RESOURCE, GPU_STARTUP_TAINT_KEY
from tests.e2e.cluster import KUBELET_UNIT, Cluster
from tests.e2e.hosts import Process, wait_for

# The fleet's first node index, printed as six digits: read as a base-36 instance id (36**4 and up) no node the box
# boots reaches, and low enough for the fleet's address blocks (an index stays under 2**16 per pool).
FIRST_INDEX = 10_000


def fleet_pools(cluster: Cluster) -> list[dict[str, Any]]:
    """Each prod pool as the fleet registers it: the rendered kubelet's labels and taints, the VM size's
    capacity, ``maxPods``. The GPU start-up taint is left off: the health check lifts it from a healthy
    node, and a benchmark node is healthy."""
    pools = []
    by_name = {p.name: p for p in cluster.spec.config.node_pools}
    for scale_set in filter(lambda s: s.first_shard, cluster.plan.scale_sets()):
        name = scale_set.pool
        machine = scale_set.instance(0)
        argv = machine.unit(KUBELET_UNIT).exec_start
        (flag,) = [a for a in argv if a.startswith("--node-labels=")]
        labels = dict(pair.split("=", 1) for pair in flag.split("=", 1)[1].split(","))
        config = yaml.safe_load((machine.files / "etc/kubernetes/kubelet-config.yaml").read_text())
        taints = [t for t in config.get("registerWithTaints", []) if t["key"] != GPU_STARTUP_TAINT_KEY]
        size = VM_SIZES[scale_set.vm_size]
        capacity = {
            "cpu": str(size.vcpus),
            "memory": f"{size.memory_gib}Gi",
            "pods": str(config["maxPods"]),
            "ephemeral-storage": "1000Gi",
        }
        if size.gpus:
            capacity[GPU_RESOURCE] = str(size.gpus)
        pools.append(
            {
                "name": name,
                "max": by_name[name].max_nodes,
                # Named as Azure names the first shard's VMs (prefix + six characters): the node-labels policy
                # (infra/control_plane/admission.py) admits a kubelet's pool labels only under its pool's names.
                "namePrefix": scale_set.computer_name_prefix,
                "labels": labels,
                "taints": taints,
                "capacity": capacity,
            }
        )
    return pools


def split(pools: list[dict[str, Any]], total: int) -> dict[str, int]:
    """``total`` nodes over the pools in proportion to their ``maxNodes``."""
    weights = sum(p["max"] for p in pools)
    counts = {p["name"]: total * p["max"] // weights for p in pools}
    counts[pools[0]["name"]] += total - sum(counts.values())
    return counts


@dataclass
class Fleet:
    cluster: Cluster
    binary: str
    workdir: Path
    pools: list[dict[str, Any]]
    created: dict[str, int] = field(default_factory=dict)
    processes: list[Process] = field(default_factory=list)
    names: list[str] = field(default_factory=list)  # every node registered so far, in order

    @property
    def nodes(self) -> int:
        return sum(self.created.values())

    def grow(
        self,
        counts: dict[str, int],
        prefix: str,
        register_qps: float = 0,
        timeout: float = 900,
        extra_args: Sequence[str] = (),
    ) -> dict[str, Any]:
        """Starts a fleet process (``prefix`` names it) for ``counts`` more nodes per pool, named as the pool's
        first scale set names its VMs, with indexes after every node so far (``names``); returns its registration
        report once every node is registered. ``extra_args``: more fleet flags (the scheduler benchmark's nodes
        never heartbeat)."""
        # Each process's indexes start after every index a pool has used, and far above the box's own nodes'
        # (booted as instances 0, 1, ... of the same scale sets: tests/e2e/plan_machines.py).
        offset = FIRST_INDEX + self.nodes
        profile = {
            "pools": [
                {
                    "name": p["name"],
                    "count": counts.get(p["name"], 0),
                    "namePrefix": p["namePrefix"],
                    "labels": p["labels"],
                    "taints": p["taints"],
                    "capacity": p["capacity"],
                }
                for p in self.pools
                if counts.get(p["name"], 0)
            ]
        }
        path = self.workdir / f"profile-{prefix}.json"
        path.write_text(json.dumps(profile))
        process = self.cluster.network.start(
            self.cluster.admin,
            f"fleet-{prefix}",
            [
                self.binary,
                f"--kubeconfig={self.cluster.kubeconfig}",
                f"--profile={path}",
                f"--register-qps={register_qps}",
                f"--offset={offset}",
                # Each node's requests as that node (impersonated): authorized, admitted and queued by API
                # Priority and Fairness as a kubelet's, not exempt as the admin's would be.
                "--as-nodes",
                *extra_args,
            ],
        )
        self.processes.append(process)
        report = wait_for(
            f"{sum(counts.values())} simulated nodes to register",
            lambda: last_event(process, "registered"),
            timeout=timeout,
            interval=2,
            on_timeout=lambda: process.output()[-2000:],
        )
        for p in self.pools:
            count = counts.get(p["name"], 0)
            self.created[p["name"]] = self.created.get(p["name"], 0) + count
            self.names += [f"{p['namePrefix']}{i:06d}" for i in range(offset, offset + count)]
        return report

    def pods_started(self) -> int:
        """Pods the fleet has marked running so far, over all its processes."""
        return sum((events(p, "report") or [{}])[-1].get("podsStarted", 0) for p in self.processes)

    def reports(self) -> list[dict[str, Any]]:
        return [r for p in self.processes for r in events(p, "report")]


def settle(fleet: Fleet, quiet: float = 20, timeout: float = 300) -> None:
    """Waits until no new pod has started for ``quiet`` seconds (at most ``timeout``): a step is
    measured in its steady state, after the DaemonSets have put their pods on the new nodes."""
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        started = fleet.pods_started()
        if started != last:
            last, since = started, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
        time.sleep(5)


def events(process: Process, kind: str) -> list[dict[str, Any]]:
    """The JSON lines of ``kind`` a fleet process has printed so far (its only stdout)."""
    found = []
    for line in process.output().splitlines():
        if line.startswith("{"):
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if event.get("event") == kind:
                found.append(event)
    return found


def last_event(process: Process, kind: str) -> dict[str, Any] | None:
    if not process.alive():
        raise RuntimeError(f"fleet exited: {process.output()[-2000:]}")
    found = events(process, kind)
    return found[-1] if found else None
