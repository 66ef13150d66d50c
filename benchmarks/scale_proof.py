"""The scale proof: prod's rendered control plane, simulated nodes, the seeds' load patterns, Kubernetes' SLOs.

    sudo .venv/bin/python benchmarks/scale_proof.py [--steps 1000,2500,5000,7500] [--window 60]

Boots prod's control plane exactly as rendered (5 etcd + 3 events-etcd members, 5 apiservers,
controller-managers, schedulers with both profiles) on the real binaries through the
cluster-in-a-box harness (tests/e2e), then:

1. grows a fleet of simulated nodes (``fleet``, tests/e2e/go/kubernetes/cmd/fleet) with the prod
   pools' rendered labels, taints and capacity and kubelet's heartbeat cadence (a Lease renewal
   every 10 s, a status report every 5 min), step by step, measuring each step over a steady
   window, and stops growing where the machine saturates;
2. at the largest size reached, drives the seeds' load patterns, each measured side by side with
   the rendered setting and without it: a join burst (unpaced vs paced), a research job burst with
   a gang that must bind whole on GPU nodes, an Event storm (events override on vs off: the
   apiservers are restarted without ``--etcd-servers-overrides``), and per-node agents that LIST
   pods cluster-wide (the rendered API Priority and Fairness objects present vs deleted);
3. reads every figure from the apiservers' and etcd's own metrics, compares it with the SLO or
   seed figure, prints the table, and writes ``results.json``, ``table.md`` and the plots
   (``benchmarks/scale/plots.py``) to ``--out``.

Ends by itself: every wait is bounded, and the whole run stops growing at ``--max-minutes``.
Not part of the test suite. docs/scale-proof.md has the last measured table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from benchmarks.scale import joins, metrics, plots  # noqa: E402
from benchmarks.scale.metrics import Snapshot  # noqa: E402
from benchmarks.scale.report import SLO_MUTATING_S, render  # noqa: E402
from infra.facts.labels import GPU_RESOURCE, ROLE_CPU, ROLE_GPU, ROLE_LABEL  # noqa: E402
from tests.e2e.cluster import (  # noqa: E402
    APISERVER_UNIT,
    FIELD_MANAGER,
    RENDERED_ETCD_CONFIG,
    Cluster,
    boot,
    objects_in_apply_order,
    unit_argv,
)
from tests.e2e.fleet import Fleet, fleet_pools, settle, split  # noqa: E402
from tests.e2e.hosts import wait_for  # noqa: E402

LOAD = Path(__file__).with_name("scale") / "load.py"
EVENTS_OVERRIDE_FLAG = "--etcd-servers-overrides"
APF_OBJECTS = ("FlowSchema", "PriorityLevelConfiguration")
MUTATING = {"POST", "PUT", "PATCH", "DELETE", "APPLY"}


# ------------------------------------------------------------------------------------ scraping


@dataclass
class Scrape:
    apiservers: list[Snapshot]
    etcd: dict[str, list[Snapshot]]  # role -> one per member
    cpu: dict[str, float]  # CPU seconds so far per component (all its machines together)
    at: float = field(default_factory=time.monotonic)

    @cached_property  # every apiserver's samples together, summed once: window_figures reads it often
    def control_plane(self) -> Snapshot:
        return metrics.combine(self.apiservers)


def scrape(cluster: Cluster, etcd_too: bool = True) -> Scrape:
    """Every apiserver's and (``etcd_too``) every etcd member's metrics, and the CPU each component used so far."""
    apiservers = []
    for machine, _, _ in cluster.control_plane:
        # A loaded apiserver takes seconds to render its metrics; a missing scrape would read as zeros.
        status, body = cluster.raw("/metrics", url=f"https://{machine.ip}:6443", timeout=90)
        if status != 200:
            raise RuntimeError(f"{machine.name} /metrics answered {status}")
        apiservers.append(metrics.parse(body))
    etcd: dict[str, list[Snapshot]] = {}
    for role, members in cluster.etcd.items() if etcd_too else ():
        etcd[role] = []
        for machine, _, _ in members:
            url = yaml.safe_load((machine.files / RENDERED_ETCD_CONFIG).read_text())["listen-metrics-urls"]
            result = cluster.network.run(
                cluster.admin, ["curl", "-sf", "--max-time", "60", f"{url}/metrics"], timeout=90
            )
            etcd[role].append(metrics.parse(result.stdout))
    return Scrape(apiservers, etcd, cpu_by_component(cluster))


def cpu_by_component(cluster: Cluster) -> dict[str, float]:
    """CPU seconds (user + system) used so far by every process the box started, per component:
    each process runs in a process group of its own, led by the process the harness started."""
    components = {}
    for process in cluster.network.processes:
        name = process.name.split("-with")[0]
        if name == "etcd" and "events" in process.host.name:
            name = "events-etcd"
        components[process.popen.pid] = "fleet" if name.startswith("fleet") else name
    ticks = os.sysconf("SC_CLK_TCK")
    totals: dict[str, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        component = components.get(int(fields[2]))  # the process group
        if component:
            totals[component] = totals.get(component, 0.0) + (int(fields[11]) + int(fields[12])) / ticks
    return totals


def request_p99s(before: Scrape, after: Scrape, minimum: int = 20) -> dict[tuple[str, str, str], float]:
    """p99 seconds per (verb, resource[/subresource], scope) with at least ``minimum`` requests."""

    def call(labels: dict[str, str]) -> tuple[str, str, str] | None:
        verb = labels.get("verb", "")
        if verb in ("WATCH", "CONNECT", ""):
            return None
        resource, subresource = labels.get("resource", ""), labels.get("subresource", "")
        return verb, f"{resource}/{subresource}" if subresource else resource, labels.get("scope", "")

    groups = metrics.histogram_deltas(
        before.control_plane, after.control_plane, "apiserver_request_duration_seconds", call
    )
    return {
        key: metrics.quantile(0.99, buckets)
        for key, buckets in groups.items()
        if metrics.observations(buckets) >= minimum
    }


def apiserver_figures(before: Scrape, after: Scrape) -> dict[str, Any]:
    """The figures the apiservers' metrics alone give (no etcd scrape: a cheaper window while settling)."""
    seconds = after.at - before.at
    p99 = request_p99s(before, after)
    watches = [metrics.watches_by_resource(snapshot) for snapshot in after.apiservers]
    heap = [metrics.gauge(s, "go_memstats_heap_inuse_bytes") for s in after.apiservers]
    cpu = {name: round((after.cpu.get(name, 0.0) - before.cpu.get(name, 0.0)) / seconds, 2) for name in after.cpu}
    return {
        "seconds": round(seconds, 1),
        "cores_busy": dict(sorted(cpu.items(), key=lambda item: -item[1])),
        "requests_per_s": round(
            metrics.counter_delta(before.control_plane, after.control_plane, "apiserver_request_total") / seconds, 1
        ),
        "lease_update_p99_s": p99.get(("PUT", "leases", "resource")),
        # Watches open on each apiserver when the window ended, and all of them by resource.
        "watchers_per_apiserver": [sum(w.values()) for w in watches],
        "watchers_by_resource": {
            resource: sum(w.get(resource, 0) for w in watches) for resource in sorted({r for w in watches for r in w})
        },
        "apiserver_heap_gib_mean": round(sum(heap) / len(heap) / 2**30, 2) if heap else None,
    }


def window_figures(cluster: Cluster, before: Scrape, after: Scrape) -> dict[str, Any]:
    """Everything a window shows: the apiservers' figures (``apiserver_figures``), etcd's, and the worst calls."""
    seconds = after.at - before.at
    p99 = request_p99s(before, after)
    mutating = {k: v for k, v in p99.items() if k[0] in MUTATING}
    gets = {k: v for k, v in p99.items() if k[0] == "GET" and k[2] == "resource"}
    lists = {k: v for k, v in p99.items() if k[0] == "LIST" and k[2] == "cluster"}

    def worst(group: dict) -> tuple[str, float | None]:
        if not group:
            return "", None
        key = max(group, key=lambda k: group[k])
        return " ".join(key[:2]), group[key]

    main = before.etcd["etcd"][0], after.etcd["etcd"][0]
    events = before.etcd["events-etcd"][0], after.etcd["events-etcd"][0]
    commit = metrics.histogram_delta(
        metrics.combine(before.etcd["etcd"]),
        metrics.combine(after.etcd["etcd"]),
        "etcd_disk_backend_commit_duration_seconds",
    )
    leases = metrics.histogram_delta(
        before.control_plane,
        after.control_plane,
        "apiserver_request_duration_seconds",
        lambda labels: (
            (labels.get("verb"), labels.get("resource"), labels.get("scope")) == ("PUT", "leases", "resource")
        ),
    )
    node_high_wait = metrics.histogram_delta(
        before.control_plane,
        after.control_plane,
        "apiserver_flowcontrol_request_wait_duration_seconds",
        lambda labels: labels.get("priority_level") == "node-high" and labels.get("execute") == "true",
    )
    rss = [metrics.gauge(s, "process_resident_memory_bytes") for s in after.apiservers]
    return {
        **apiserver_figures(before, after),
        "http_429": metrics.counter_delta(
            before.control_plane,
            after.control_plane,
            "apiserver_request_total",
            lambda labels: labels.get("code") == "429",
        ),
        # The median beside the p99: the plots draw each pattern's spread from the p50 to the p99.
        "lease_update_p50_s": metrics.quantile(0.5, leases) if ("PUT", "leases", "resource") in p99 else None,
        # How long heartbeats and status updates queued in API Priority and Fairness before running.
        "node_high_wait_p99_s": metrics.quantile(0.99, node_high_wait),
        "worst_mutating": worst(mutating),
        "worst_get": worst(gets),
        "worst_cluster_list": worst(lists),
        "apiserver_rss_gib_mean": round(sum(rss) / len(rss) / 2**30, 2) if rss else None,
        "etcd_db_mib": round(metrics.gauge(after.etcd["etcd"][0], "etcd_mvcc_db_total_size_in_bytes") / 2**20, 1),
        "etcd_commit_p99_ms": _ms(metrics.quantile(0.99, commit)),
        "main_etcd_puts_per_s": round(metrics.counter_delta(*main, "etcd_mvcc_put_total") / seconds, 1),
        "events_etcd_puts_per_s": round(metrics.counter_delta(*events, "etcd_mvcc_put_total") / seconds, 1),
        # What the apiservers read from the main etcd (all members), and what they sent their watchers: the
        # 2,500-node post saw the apiservers read over 500 MB/s from etcd, the 7,500-node one watches over 1 GB/s.
        "main_etcd_sent_mib_per_s": round(
            metrics.counter_delta(
                metrics.combine(before.etcd["etcd"]),
                metrics.combine(after.etcd["etcd"]),
                "etcd_network_client_grpc_sent_bytes_total",
            )
            / seconds
            / 2**20,
            2,
        ),
        "watch_events_mib_per_s": round(
            metrics.counter_delta(before.control_plane, after.control_plane, "apiserver_watch_events_sizes_sum")
            / seconds
            / 2**20,
            2,
        ),
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


# ------------------------------------------------------------------------------------ load patterns


def load(cluster: Cluster, mode: str, *args: str, token: Path | None = None, timeout: float = 600) -> dict[str, Any]:
    credentials = (
        ["--token", str(token)]
        if token
        else ["--cert", str(cluster.workdir / "admin.crt"), "--key", str(cluster.workdir / "admin.key")]
    )
    result = cluster.network.run(
        cluster.admin,
        [
            "python3",
            str(LOAD),
            mode,
            "--server",
            cluster.apiserver_url,
            "--ca",
            str(cluster.workdir / "ca.crt"),
            *credentials,
            *args,
        ],
        timeout=timeout,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def measured(cluster: Cluster, action) -> tuple[Any, dict[str, Any]]:
    before = scrape(cluster)
    outcome = action()
    after = scrape(cluster)
    return outcome, window_figures(cluster, before, after)


def job_burst(cluster: Cluster, workdir: Path, gpu_nodes: int, cpu_pods: int) -> dict[str, Any]:
    """A research job: ``cpu_pods`` small pods, and a gang of GPU pods, one whole node each, that must
    bind together (PodGroup, gang-scheduler)."""
    gang = max(2, min(300, gpu_nodes // 2))
    run = f"burst{int(time.time()) % 100000}"
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": run, "namespace": "default"},
        "spec": {"minMember": gang},
    }
    cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(group))
    documents = []
    for i in range(gang):
        documents.append(
            _pod(
                f"{run}-gang-{i}",
                {ROLE_LABEL: ROLE_GPU},
                {GPU_RESOURCE: "8", "cpu": "1"},
                {"scheduling.x-k8s.io/pod-group": run, "bench": run},
                scheduler="gang-scheduler",
            )
        )
    for i in range(cpu_pods):
        documents.append(_pod(f"{run}-cpu-{i}", {ROLE_LABEL: ROLE_CPU}, {"cpu": "1"}, {"bench": run}))
    path = workdir / f"{run}.json"
    path.write_text(json.dumps(documents))
    started = time.monotonic()
    created = load(cluster, "pods", "--file", str(path), "--concurrency", "16")

    def bound() -> dict[str, int] | None:
        items = cluster.get_json("pods", "-n", "default", "-l", f"bench={run}")["items"]
        counts = {
            "gang": sum(1 for p in items if "-gang-" in p["metadata"]["name"] and p["spec"].get("nodeName")),
            "cpu": sum(1 for p in items if "-cpu-" in p["metadata"]["name"] and p["spec"].get("nodeName")),
        }
        return counts if counts == {"gang": gang, "cpu": cpu_pods} else None

    wait_for("the job burst to bind", bound, timeout=600, interval=1)
    seconds = time.monotonic() - started
    items = cluster.get_json("pods", "-n", "default", "-l", f"bench={run}")["items"]
    startup = sorted(_startup_seconds(p) for p in items if _startup_seconds(p) is not None)
    cluster.kubectl("delete", "pods", "-n", "default", "-l", f"bench={run}", "--wait=false", timeout=120)
    return {
        "pods": gang + cpu_pods,
        "gang": gang,
        "create": created,
        "all_bound_s": round(seconds, 1),
        "pods_per_s": round((gang + cpu_pods) / seconds, 1),
        "startup_p99_s": startup[min(len(startup) - 1, int(0.99 * len(startup)))] if startup else None,
    }


def _pod(name: str, selector: dict, requests: dict, labels: dict, scheduler: str | None = None) -> dict:
    spec: dict[str, Any] = {
        "nodeSelector": selector,
        "containers": [
            {
                "name": "c",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": requests, "limits": {k: v for k, v in requests.items() if k == GPU_RESOURCE}},
            }
        ],
        "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
    }
    if scheduler:
        spec["schedulerName"] = scheduler
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": spec,
    }


def _startup_seconds(pod: dict) -> float | None:
    """Creation to Ready, as the SLO counts pod start-up (seconds resolution of the API's timestamps)."""
    ready = [c for c in pod.get("status", {}).get("conditions", []) if c["type"] == "Ready" and c["status"] == "True"]
    if not ready:
        return None
    from datetime import datetime

    parse = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))  # noqa: E731
    return (parse(ready[0]["lastTransitionTime"]) - parse(pod["metadata"]["creationTimestamp"])).total_seconds()


def set_events_override(cluster: Cluster, on: bool) -> None:
    """Restarts the apiservers one at a time with or without ``--etcd-servers-overrides``."""
    for machine, host, processes in cluster.control_plane:
        argv = unit_argv(machine, host, APISERVER_UNIT)  # as systemd runs it: its ${MACHINE_ADDRESS} replaced
        if not on:
            argv = [a for a in argv if not a.startswith(EVENTS_OVERRIDE_FLAG)]
        processes[APISERVER_UNIT].stop()
        name = f"kube-apiserver-{'with' if on else 'without'}-override"
        processes[APISERVER_UNIT] = cluster.network.start(host, name, argv, restart_sec=5)
        wait_for(
            f"{machine.name} ready again",
            lambda m=machine: cluster.raw("/readyz", url=f"https://{m.ip}:6443")[0] == 200,
            timeout=180,
            interval=1,
        )


def agent_token(cluster: Cluster) -> Path:
    """A service account that may list pods: the identity of a per-node agent (Fluentd, Datadog)."""
    cluster.kubectl(
        "create",
        "-f",
        "-",
        input=yaml.safe_dump_all(
            [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "agents"}},
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "agent", "namespace": "agents"}},
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRole",
                    "metadata": {"name": "bench-agent"},
                    "rules": [{"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["list"]}],
                },
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": "bench-agent"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "bench-agent"},
                    "subjects": [{"kind": "ServiceAccount", "name": "agent", "namespace": "agents"}],
                },
            ]
        ),
    )
    token = cluster.kubectl("create", "token", "agent", "-n", "agents", "--duration=2h").stdout.strip()
    path = cluster.workdir / "agent.token"
    path.write_text(token)
    return path


def rendered_apf(cluster: Cluster) -> list[dict]:
    return [d for _, d in objects_in_apply_order(cluster.plan) if d["kind"] in APF_OBJECTS]


# ------------------------------------------------------------------------------------ the run


def built_binaries() -> Path:
    """The cluster in a box's binaries folder (scripts/build-binaries.sh builds it once per machine)."""
    built = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build-binaries.sh")], check=True, capture_output=True, text=True
    )
    return Path(built.stdout.split()[-1])


def fresh_workdir(out: str | None, prefix: str) -> Path:
    """``--out`` (or a new temporary folder), without an earlier run's machines: they are never reused."""
    workdir = Path(out).resolve() if out else Path(tempfile.mkdtemp(prefix=prefix))
    workdir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(workdir / "box", ignore_errors=True)
    return workdir


def join_bursts(
    cluster: Cluster, fleet: Fleet, args: argparse.Namespace, baseline: float | None, deadline: float
) -> list[dict[str, Any]]:
    """``--join-runs`` bursts of ``--join-burst`` nodes, with the rendered pacing and without it in turn, from
    ``--join-first``. Paced: fleet registers at the autoscaler's rendered pace
    (``joins.Pacing.fleet_flags``) and the rendered join priority level is in place. Unpaced: all at once, with
    that level deleted (Node creates then fall to the built-in ``node-high``, with the heartbeats). Each burst is
    measured over ``--window`` seconds from its start, and the cluster settles (``settle_back``) before the next
    one. The nodes stay: each burst starts ``--join-burst`` nodes above the last, so a run's order decides its
    size, and runs in the opposite order (``--join-first``) give each mode the same sizes."""
    documents = [d for _, d in objects_in_apply_order(cluster.plan)]
    pacing, level = joins.rendered_pacing(documents), joins.join_level(documents)
    runs = []
    modes = joins.order(args.join_first, args.join_runs)
    for index, mode in enumerate(modes):
        if time.monotonic() + args.window + 180 > deadline:
            print(json.dumps({"join_burst": index + 1, "skipped": f"--max-minutes {args.max_minutes} reached"}))
            break
        paced = mode == joins.PACED
        set_join_level(cluster, level, present=paced)
        nodes_before = fleet.nodes
        before, started = scrape(cluster), time.monotonic()
        registration = fleet.grow(
            split(fleet.pools, args.join_burst),
            prefix=f"join{index + 1}-{mode}",
            extra_args=[*watch_flags(args), *(pacing.fleet_flags() if paced else [])],
        )
        time.sleep(max(0.0, started + args.window - time.monotonic()))
        after = scrape(cluster)
        run = {
            "mode": mode,
            "nodes_before": nodes_before,
            "burst": args.join_burst,
            "pacing": f"{pacing.per_scaleup} nodes per {pacing.interval_s:g} s" if paced else "all at once",
            "registration": registration,
            **window_figures(cluster, before, after),
            "load_1m": os.getloadavg()[0],
        }
        # ``--join-settle between``: a hold of one burst on a fresh cluster ends with its window.
        if args.join_settle == "each" or index + 1 < len(modes):
            run["settle"] = settle_back(fleet, cluster, baseline)
        runs.append(run)
        print(json.dumps({"join_burst": index + 1, **run}), flush=True)
    set_join_level(cluster, level, present=True)
    return runs


def watch_flags(args: argparse.Namespace) -> list[str]:
    """``--fleet-watches kubelet``: each simulated node holds a kubelet's watches (fleet's ``--kubelet-watches``);
    ``shared``: one node and one pod watch per fleet process, as the scale proof measured before."""
    return ["--kubelet-watches"] if args.fleet_watches == "kubelet" else []


def set_join_level(cluster: Cluster, level: list, present: bool) -> None:
    """Applies the rendered join FlowSchema and priority level, or deletes them."""
    if present:
        # As the box applied them (its field manager): the same manager may re-apply without conflicts.
        cluster.kubectl(
            "apply", "--server-side", f"--field-manager={FIELD_MANAGER}", "-f", "-", input=yaml.safe_dump_all(level)
        )
    else:
        for document in level:
            cluster.kubectl("delete", "--ignore-not-found", document["kind"].lower(), document["metadata"]["name"])


def settle_back(fleet: Fleet, cluster: Cluster, baseline: float | None, timeout: float = 120) -> dict[str, Any]:
    """After a join burst: waits until its nodes' DaemonSet pods run (``settle``), then until the lease p99,
    over 20-s windows, is back within 1.5x of ``baseline`` (or 0.2 s). Both waits are bounded; ``settled``
    says whether the lease p99 got back."""
    started = time.monotonic()
    settle(fleet, timeout=150)
    threshold = max(1.5 * (baseline or 0.0), 0.2)
    deadline = time.monotonic() + timeout
    while True:
        before = scrape(cluster, etcd_too=False)
        time.sleep(20)
        figures = apiserver_figures(before, scrape(cluster, etcd_too=False))
        lease = figures["lease_update_p99_s"]
        if (lease is not None and lease <= threshold) or time.monotonic() > deadline:
            break
    return {
        "seconds": round(time.monotonic() - started),
        "lease_update_p99_s": lease,
        "settled": lease is not None and lease <= threshold,
        # The last 20-s window, the cluster settled at its new size: a growth step of its own (watches, heap, CPU).
        "nodes": fleet.nodes,
        "window": figures,
    }


def other_patterns(cluster: Cluster, workdir: Path, args: argparse.Namespace, gpu_nodes: int, patterns: dict) -> None:
    """The job burst, the Event storm and the per-node agents, each with the rendered setting and without it."""
    patterns["job_burst"], figures = measured(cluster, lambda: job_burst(cluster, workdir, gpu_nodes, args.cpu_pods))
    patterns["job_burst"].update(figures)
    for label, on in (("override_on", True), ("override_off", False)):
        if not on:
            set_events_override(cluster, False)
        storm, figures = measured(
            cluster, lambda: load(cluster, "events", "--count", str(args.events), "--concurrency", "32")
        )
        patterns[f"event_storm_{label}"] = {"storm": storm, **figures}
    set_events_override(cluster, True)
    token = agent_token(cluster)
    for label in ("apf_rendered", "apf_removed"):
        if label == "apf_removed":
            for document in rendered_apf(cluster):
                cluster.kubectl("delete", document["kind"].lower(), document["metadata"]["name"])
        agents, figures = measured(
            cluster,
            lambda: load(
                cluster,
                "list",
                "--agents",
                str(args.agents),
                "--interval",
                "2",
                "--duration",
                str(args.window),
                "--path",
                "/api/v1/pods",
                token=token,
                timeout=args.window + 300,
            ),
        )
        patterns[f"list_agents_{label}"] = {"agents": agents, **figures}


def run(args: argparse.Namespace) -> dict[str, Any]:
    binaries = built_binaries()
    workdir = fresh_workdir(args.out, "scale-proof-")
    deadline = time.monotonic() + args.max_minutes * 60
    started = time.monotonic()
    cluster = boot("prod", workdir / "box", binaries, with_nodes=False)
    results: dict[str, Any] = {"machine": _machine(), "boot_s": round(time.monotonic() - started, 1), "steps": []}
    try:
        fleet = Fleet(cluster, str(binaries / "fleet"), workdir, fleet_pools(cluster))
        results["pools"] = {
            p["name"]: {"labels": p["labels"], "taints": p["taints"], "capacity": p["capacity"]} for p in fleet.pools
        }
        for target in args.steps:
            if time.monotonic() > deadline:
                results["stopped"] = f"--max-minutes {args.max_minutes} reached before {target} nodes"
                break
            wanted = split(fleet.pools, target)
            increment = {name: wanted[name] - fleet.created.get(name, 0) for name in wanted}
            try:
                registration = fleet.grow(
                    increment,
                    prefix=f"step{len(results['steps'])}",
                    timeout=max(60.0, deadline - time.monotonic()),
                    extra_args=watch_flags(args),
                )
            except (TimeoutError, RuntimeError) as error:
                results["stopped"] = f"growing to {target} nodes failed: {error}"
                break
            settle(fleet)  # the new nodes' DaemonSet pods started, their first heartbeats spread out
            _, figures = measured(cluster, lambda: time.sleep(args.window))
            step = {
                "nodes": fleet.nodes,
                "registration": registration,
                **figures,
                "fleet": (fleet.reports() or [{}])[-1],
                "load_1m": os.getloadavg()[0],  # the machine is shared: its load beside every figure
            }
            results["steps"].append(step)
            print(json.dumps(step), flush=True)
            if (figures["lease_update_p99_s"] or 0) > SLO_MUTATING_S or figures["http_429"] > 0:
                results["stopped"] = f"saturated at {fleet.nodes} nodes: lease update p99 or 429s over the SLO"
                break
        patterns: dict[str, Any] = {}
        gpu_nodes = sum(
            n
            for name, n in fleet.created.items()
            if next(p for p in fleet.pools if p["name"] == name)["labels"].get(ROLE_LABEL) == ROLE_GPU
        )
        baseline = results["steps"][-1]["lease_update_p99_s"] if results["steps"] else None
        runs = join_bursts(cluster, fleet, args, baseline, deadline)
        patterns["join_bursts"] = runs
        for mode in (joins.PACED, joins.UNPACED):
            median = joins.median_run(runs, mode)
            if median:
                patterns[f"join_burst_{mode}"] = median
        if args.patterns == "all":
            other_patterns(cluster, workdir, args, gpu_nodes, patterns)
        results["patterns"] = patterns
    finally:
        cluster.close()
    results["total_s"] = round(time.monotonic() - started, 1)
    (workdir / "results.json").write_text(json.dumps(results, indent=2))
    table = render(results)
    try:
        table += "\n" + plots.markdown(plots.write_plots(results, workdir))
    except plots.PlotDataError as error:  # a run that stopped early: the table still stands
        table += f"\nNo plots: {error}.\n"
    (workdir / "table.md").write_text(table)
    print(table)
    print(f"results in {workdir}")
    return results


def _machine() -> str:
    cpus = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    memory = next(
        line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")
    )
    return f"{cpus} cores, {int(memory) // 2**20} GiB"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=lambda s: [int(x) for x in s.split(",")], default=[1000, 2500, 5000, 7500])
    parser.add_argument("--window", type=float, default=60, help="seconds each step and pattern is measured over")
    parser.add_argument("--join-burst", type=int, default=500, help="nodes joining at once")
    parser.add_argument("--join-runs", type=int, default=6, help="join bursts in all, paced and unpaced in turn")
    parser.add_argument("--join-first", choices=[joins.PACED, joins.UNPACED], default=joins.PACED)
    parser.add_argument(
        "--join-settle",
        choices=["each", "between"],
        default="each",
        help="each: the cluster settles after every burst; between: only before the next one",
    )
    parser.add_argument(
        "--patterns", choices=["all", "join"], default="all", help="join: the join bursts only (one lock hold)"
    )
    parser.add_argument(
        "--fleet-watches",
        choices=["kubelet", "shared"],
        default="kubelet",
        help="kubelet: each simulated node holds a kubelet's watches; shared: one node and one pod watch per process",
    )
    parser.add_argument("--cpu-pods", type=int, default=500)
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--max-minutes", type=float, default=40, help="stop growing after this long")
    parser.add_argument("--out", help="folder for results.json and table.md (default: a new temporary folder)")
    # A signal stops the run like an error: the box is torn down (run()'s finally), nothing is left behind.
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)  # also when started in the background, where SIGINT is ignored
    run(parser.parse_args(argv))


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(f"scale proof: stopped by signal {signum}")


if __name__ == "__main__":
    main()
