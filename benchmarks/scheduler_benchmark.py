"""The scheduler at 1,000 to 7,500 nodes: pod bursts and a gang against prod's rendered scheduler.

    sudo .venv/bin/python benchmarks/scheduler_benchmark.py [--sizes 1000,2500,5000,7500]
        [--percentages 100,0,10] [--bursts 100,500,1000] [--gang 1000] [--out build/scheduler]

Boots prod's control plane as rendered through the cluster-in-a-box harness (tests/e2e), stops the
controller-managers, and registers Ready nodes with the prod pools' rendered labels, taints and
allocatable (``fleet``, no heartbeats: with no node lifecycle controller nothing marks them
NotReady, and no DaemonSet pods are created for them). Then, at each size and for each
``percentageOfNodesToScore``, for each burst: the burst's pods are created while no scheduler runs,
one scheduler is started with the rendered configuration and that one value changed (and leader
election off: it is the only one), and the run ends when the scheduler has bound them all. A burst
is ``N`` one-CPU pods on the CPU pool through ``default-scheduler``, or a gang of ``--gang``
one-GPU pods through ``gang-scheduler`` (one PodGroup, ``minMember`` all of them) on the GPU pools.

Figures, each from one run: pods/s (the burst over the time from the scheduler answering its
``/metrics`` to its last bind, polled every 0.2 s from its own ``scheduler_schedule_attempts_total``;
the span includes its informers' first sync), the scheduling SLI's
p99 (``scheduler_pod_scheduling_sli_duration_seconds``, the scheduler's own histogram, from the
pod's entry into the queue to its binding), packing (distinct nodes used against the fewest that
could hold the burst), and the machine's 1-minute load average when the run ended (the machine is
shared). Prints the table and writes ``results.json`` and ``table.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from benchmarks.scale import metrics, scheduling  # noqa: E402
from benchmarks.scale_proof import _machine, _pod, built_binaries, fresh_workdir, load  # noqa: E402
from infra.control_plane import paths, scheduler  # noqa: E402
from infra.facts.labels import GPU_RESOURCE, ROLE_CPU, ROLE_GPU, ROLE_LABEL  # noqa: E402
from tests.e2e.cluster import Cluster, boot, start_unit, unit_argv  # noqa: E402
from tests.e2e.fleet import Fleet, fleet_pools, split  # noqa: E402
from tests.e2e.hosts import Process, wait_for  # noqa: E402

SCHEDULER_UNIT = paths.SCHEDULER_UNIT
CONTROLLER_MANAGER_UNIT = paths.CONTROLLER_MANAGER_UNIT
# Registered nodes that never heartbeat: a lease renewal an hour apart, no status report, no pods run.
IDLE_FLEET = ["--lease-duration=14400s", "--status-update=1h", "--status-report=1h", "--run-pods=false"]
CPU_REQUEST = {"cpu": "1", "memory": "2Gi"}
GANG_REQUEST = {GPU_RESOURCE: "1", "cpu": "1"}
SLI = "scheduler_pod_scheduling_sli_duration_seconds"
BENCH_CONFIG = "etc/kubernetes/scheduler-benchmark.yaml"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


def scheduler_metrics(cluster: Cluster) -> metrics.Snapshot:
    machine = cluster.control_plane[0][0]
    result = cluster.network.run(
        cluster.admin,
        [
            # The scheduler serves a certificate it signed itself (no --tls-cert-file is rendered).
            "curl",
            "-skf",
            "--max-time",
            "20",
            "--cert",
            str(cluster.workdir / "admin.crt"),
            "--key",
            str(cluster.workdir / "admin.key"),
            f"https://{machine.ip}:{scheduler.SECURE_PORT}/metrics",
        ],
        check=False,
        timeout=30,
    )
    return metrics.parse(result.stdout) if result.returncode == 0 else metrics.Snapshot({})


def scheduled(snapshot: metrics.Snapshot) -> float:
    return metrics.gauge(snapshot, "scheduler_schedule_attempts_total", lambda labels: labels["result"] == "scheduled")


def start_scheduler(cluster: Cluster, percentage: int) -> Process:
    """One scheduler on the first apiserver VM: the rendered unit line as systemd runs it (its ``${MACHINE_ADDRESS}``
    replaced from its EnvironmentFile), the rendered config with ``percentageOfNodesToScore`` changed and leader
    election off."""
    machine, host, _ = cluster.control_plane[0]
    rendered = yaml.safe_load((machine.files / paths.SCHEDULER_CONFIG.lstrip("/")).read_text())
    (host.root / BENCH_CONFIG).write_text(yaml.safe_dump(scheduling.variant(rendered, percentage)))
    argv = [
        f"--config=/{BENCH_CONFIG}" if a.startswith("--config=") else a
        for a in unit_argv(machine, host, SCHEDULER_UNIT)
    ]
    return start_unit(cluster, machine, host, SCHEDULER_UNIT, argv)


def burst_pods(run: str, burst: str, count: int) -> list[dict[str, Any]]:
    if burst == "gang":
        return [
            _pod(
                f"{run}-{i}",
                {ROLE_LABEL: ROLE_GPU},
                GANG_REQUEST,
                {scheduler.POD_GROUP_LABEL: run, "bench": run},
                scheduler=scheduler.GANG_PROFILE,
            )
            for i in range(count)
        ]
    return [_pod(f"{run}-{i}", {ROLE_LABEL: ROLE_CPU}, CPU_REQUEST, {"bench": run}) for i in range(count)]


def one_run(cluster: Cluster, fleet: Fleet, workdir: Path, percentage: int, burst: str, count: int) -> dict[str, Any]:
    run = f"s{fleet.nodes}-p{percentage}-{burst}-{count}"
    if burst == "gang":
        group = {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": run, "namespace": "default"},
            # Long enough that a slow run on a loaded machine measures the gang rather than its timeout.
            "spec": {"minMember": count, "scheduleTimeoutSeconds": 900},
        }
        cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(group))
    try:
        return measure(cluster, fleet, workdir, run, percentage, burst, count)
    finally:
        remove(cluster, run, burst)


def remove(cluster: Cluster, run: str, burst: str) -> None:
    """A run's pods (no kubelet will ever stop them: deleted at once) and PodGroup."""
    cluster.kubectl(
        "delete",
        "--raw",
        f"/api/v1/namespaces/default/pods?labelSelector=bench%3D{run}&gracePeriodSeconds=0",
        timeout=300,
    )
    if burst == "gang":
        cluster.kubectl("delete", "podgroup", run, "-n", "default")
    wait_for(
        f"{run}'s pods to be gone",
        lambda: not cluster.get_json("pods", "-n", "default", "-l", f"bench={run}")["items"],
        timeout=300,
        interval=2,
    )


def measure(
    cluster: Cluster, fleet: Fleet, workdir: Path, run: str, percentage: int, burst: str, count: int
) -> dict[str, Any]:
    path = workdir / f"{run}.json"
    path.write_text(json.dumps(burst_pods(run, burst, count)))
    created = load(cluster, "pods", "--file", str(path), "--concurrency", "16", timeout=900)
    process = start_scheduler(cluster, percentage)
    ready = first = last = None
    deadline = time.monotonic() + 900
    try:
        while time.monotonic() < deadline:
            snapshot = scheduler_metrics(cluster)
            done = scheduled(snapshot)
            now = time.monotonic()
            if snapshot.samples and ready is None:
                ready = now
            if done and first is None:
                first = now
            if done >= count:
                last = now
                break
            if not process.alive():
                raise RuntimeError(f"the scheduler exited: {process.output()[-2000:]}")
            time.sleep(0.2)
        final = scheduler_metrics(cluster)
    finally:
        process.stop()
    if last is None or first is None or ready is None:
        raise TimeoutError(f"{run}: {scheduled(final)} of {count} pods bound in 900 s")
    items = cluster.get_json("pods", "-n", "default", "-l", f"bench={run}")["items"]
    bound = [p["spec"]["nodeName"] for p in items if p["spec"].get("nodeName")]
    if len(bound) != count:
        raise RuntimeError(f"{run}: the scheduler counted {count} bound, the API shows {len(bound)}")
    role = ROLE_GPU if burst == "gang" else ROLE_CPU
    pools = [p for p in fleet.pools if p["labels"].get(ROLE_LABEL) == role]
    feasible = sum(fleet.created.get(p["name"], 0) for p in pools)
    pool = pools[0]
    request = {k: scheduling.quantity(v) for k, v in (GANG_REQUEST if burst == "gang" else CPU_REQUEST).items()}
    allocatable = {k: scheduling.quantity(v) for k, v in pool["capacity"].items()}
    sli = metrics.histogram_delta(metrics.Snapshot({}), final, SLI)
    return {
        "nodes": fleet.nodes,
        "percentage": percentage,
        # The scheduler stops filtering once it found this many feasible nodes, and scores those.
        "nodes_scored": min(feasible, scheduling.nodes_scored(fleet.nodes, percentage)),
        "feasible_nodes": feasible,
        "burst": f"gang of {count}" if burst == "gang" else f"{count} pods",
        "pods": count,
        "create": created,
        # From the scheduler answering /metrics (its informers then sync) to its last bind, polled
        # every 0.2 s; a gang binds all at once at its end, so the span from the first bind says little.
        "scheduling_s": round(last - ready, 2),
        "bind_span_s": round(last - first, 2),
        "pods_per_s": round(count / max(last - ready, 0.2), 1),
        "sli_p99_s": metrics.quantile(0.99, sli),
        "sli_observations": metrics.observations(sli),
        **scheduling.packing(bound, scheduling.fewest_nodes(count, request, allocatable)),
        "load_average": round(os.getloadavg()[0], 1),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    binaries = built_binaries()
    workdir = fresh_workdir(args.out, "scheduler-")
    started = time.monotonic()
    deadline = started + args.max_minutes * 60
    cluster = boot("prod", workdir / "box", binaries, with_nodes=False)
    results: dict[str, Any] = {"machine": _machine(), "boot_s": round(time.monotonic() - started, 1), "rows": []}
    try:
        # No node lifecycle controller (nodes that never heartbeat stay Ready), no DaemonSet pods.
        for _, _, processes in cluster.control_plane:
            processes[CONTROLLER_MANAGER_UNIT].stop()
        fleet = Fleet(cluster, str(binaries / "fleet"), workdir, fleet_pools(cluster))
        for target in args.sizes:
            if time.monotonic() > deadline:
                results.setdefault("stopped", f"--max-minutes {args.max_minutes} reached before {target} nodes")
                break
            wanted = split(fleet.pools, target)
            increment = {name: wanted[name] - fleet.created.get(name, 0) for name in wanted}
            before = len(fleet.names)
            grown = time.monotonic()
            registered = fleet.grow(increment, prefix=f"size{target}", extra_args=IDLE_FLEET, timeout=1800)
            # The apiserver's TaintNodesByCondition admission taints every new Node not-ready; the node
            # lifecycle controller (stopped) would lift it once the node reports Ready, as these do.
            # Concurrent patches: kubectl taint patched one node at a time, 8 of 14 minutes at 2,500 nodes.
            own_taints = {p["namePrefix"]: len(p["taints"]) for p in fleet.pools}
            patches = scheduling.lift_taint(((n, own_taints[n[:-6]]) for n in fleet.names[before:]), NOT_READY_TAINT)
            (workdir / f"untaint-{target}.json").write_text(json.dumps(patches))
            lifted = load(cluster, "patch", "--file", str(workdir / f"untaint-{target}.json"), "--concurrency", "16")
            if lifted["codes"] != {"200": len(patches)}:
                raise RuntimeError(f"lifting the not-ready taint from {len(patches)} nodes: {lifted}")
            results.setdefault("sizes", []).append(
                {
                    "nodes": fleet.nodes,
                    "registered": registered,
                    "untainted": lifted,
                    "ready_s": round(time.monotonic() - grown, 1),
                }
            )
            print(json.dumps(results["sizes"][-1]), flush=True)
            # The rendered schedulers bound what was pending (the add-ons' pods); the runs start one at a time.
            for _, _, processes in cluster.control_plane:
                processes[SCHEDULER_UNIT].stop()
            runs = [
                (p, *b) for p in args.percentages for b in [*(("pods", n) for n in args.bursts), ("gang", args.gang)]
            ]
            # Repeats take turns (every run once, then again), so the machine's drift spreads over all of them.
            for percentage, burst, count in [r for _ in range(args.repeat) for r in runs]:
                if time.monotonic() > deadline:
                    results["stopped"] = f"--max-minutes {args.max_minutes} reached at {fleet.nodes} nodes"
                    break
                try:
                    row = one_run(cluster, fleet, workdir, percentage, burst, count)
                except (TimeoutError, RuntimeError) as error:  # recorded; the other runs still stand
                    results.setdefault("failed", []).append(f"{fleet.nodes} nodes, {percentage}, {burst}: {error}")
                    print(json.dumps({"failed": results["failed"][-1]}), flush=True)
                    continue
                results["rows"].append(row)
                print(json.dumps(row), flush=True)
    finally:
        cluster.close()
    results["total_s"] = round(time.monotonic() - started, 1)
    (workdir / "results.json").write_text(json.dumps(results, indent=2))
    text = scheduling.table(results["rows"]) + "".join(f"\nFailed: {line}\n" for line in results.get("failed", []))
    (workdir / "table.md").write_text(text)
    print(text)
    print(f"results in {workdir}")
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    numbers = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    parser.add_argument("--sizes", type=numbers, default=[1000, 2500, 5000, 7500])
    parser.add_argument("--percentages", type=numbers, default=[100, 0, 10])
    parser.add_argument(
        "--bursts", type=numbers, default=[100, 500, 1000], help="pods per burst (empty: the gang only)"
    )
    parser.add_argument("--gang", type=int, default=1000, help="one-GPU pods in the gang")
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs of each percentage and burst (the repeats take turns)"
    )
    parser.add_argument("--max-minutes", type=float, default=60, help="start no size or run after this long")
    parser.add_argument("--out", help="folder for results.json and table.md (default: a new temporary folder)")
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    run(parser.parse_args(argv))


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(f"scheduler benchmark: stopped by signal {signum}")


if __name__ == "__main__":
    main()
