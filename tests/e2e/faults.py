"""What the fault suite (tests/e2e/test_faults.py) does to a booted box, and what it reads back.

- ``Writes``: the steady writer (``writer.py``: ConfigMaps created and read back, from a host and
  through an address the scenario chooses), with the figures a scenario reports: errors and p99 per
  window, and whether every acknowledged ConfigMap is still there.
- ``BackgroundLoad``: the writer through the apiservers' load balancer and the simulated fleet
  (Lease renewals at kubelet's cadence) beside it, with the fleet's lease renewals per window.
- ``lose``: a machine lost as a VM is lost: every process on it killed at once (SIGKILL, no
  graceful shutdown, no lease released) and its NIC gone (link down), so that nothing answers at its
  address and a packet sent there is lost, as on Azure, rather than refused.
- the leader-election timings the rendered controller-manager and scheduler run with, and who
  holds each lease.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.cluster import Cluster, install, start_control_plane_machine
from tests.e2e.fleet import Fleet, events, fleet_pools, settle, split
from tests.e2e.hosts import MACHINE_PATHS, Host, Process, wait_for
from tests.e2e.plan_machines import Machine

WRITER = Path(__file__).with_name("writer.py")
WRITER_NAMESPACE = "faults"
WRITER_TIMEOUT_S = 10.0  # a writer request not answered in this long counts as an error (kubectl's --request-timeout)
SCHEDULER_CONFIG = "etc/kubernetes/kube-scheduler-config.yaml"
LEASES = ("kube-controller-manager", "kube-scheduler")
# Upstream's leader-election defaults, used when the rendered flags and config leave them unset
# (k8s.io/component-base/config/v1alpha1/defaults.go, RecommendedDefaultLeaderElectionConfiguration).
DEFAULT_LEASE_DURATION_S = 15.0
DEFAULT_RETRY_PERIOD_S = 2.0
# client-go's leader elector retries acquiring every RetryPeriod with a jitter factor of 1.2
# (k8s.io/client-go/tools/leaderelection/leaderelection.go, JitterFactor), so up to 2.2 x RetryPeriod apart.
ACQUIRE_JITTER = 2.2
# The background load: a fleet this machine holds well inside the lease SLO while the rest of the box
# runs (docs/reliability.md: measured), and a writer's steady ConfigMap creates.
FLEET_NODES = int(os.environ.get("FAULTS_FLEET_NODES", "300"))
WRITES_PER_S = 10.0
WRITER_WORKERS = 4
SLO_MUTATING_S = 1.0  # Kubernetes' API call latency SLO, mutating calls (sig-scalability slos/api_call_latency.md)
QUIET_S = 5.0  # how long a scenario lets the load run untouched before and after its fault
STEADY_TIMEOUT_S = 120.0  # how long a scenario waits for the box to be steady again before it starts


# ---------------------------------------------------------------------------------- the load


@dataclass
class Writes:
    """The steady writer's requests, from whichever host and through whichever address it writes."""

    cluster: Cluster
    writer: Process

    @classmethod
    def start(cls, cluster: Cluster, host: Host, server: str, rate: float, workers: int) -> Writes:
        """The writer on ``host``, writing to ``server`` (a URL the apiservers' certificate names)."""
        cluster.kubectl("create", "namespace", WRITER_NAMESPACE)
        writer = cluster.network.start(
            host,
            "writer",
            [
                "python3",
                str(WRITER),
                f"--server={server}",
                f"--ca={cluster.workdir / 'ca.crt'}",
                f"--cert={cluster.workdir / 'admin.crt'}",
                f"--key={cluster.workdir / 'admin.key'}",
                f"--namespace={WRITER_NAMESPACE}",
                f"--rate={rate:g}",
                f"--workers={workers}",
                f"--timeout={WRITER_TIMEOUT_S:g}",
            ],
        )
        return cls(cluster, writer)

    def records(self, since: float = 0.0, until: float = float("inf"), op: str | None = None) -> list[dict[str, Any]]:
        """The writer's requests that started in ``[since, until)``."""
        found = []
        for line in self.writer.output().splitlines():
            if line.startswith("{"):
                record = json.loads(line)
                if since <= record["t"] < until and op in (None, record["op"]):
                    found.append(record)
        return found

    def acknowledged(self) -> set[str]:
        return {r["name"] for r in self.records(op="create") if r["code"] == 201}

    def missing(self) -> list[str]:
        """Acknowledged ConfigMaps that the API no longer has (read from a fresh LIST, taken after the
        acknowledgements it is checked against: a write acknowledged meanwhile is not yet in it)."""
        acknowledged = self.acknowledged()
        names = self.cluster.kubectl("get", "configmaps", "-n", WRITER_NAMESPACE, "-o", "name", timeout=120).stdout
        present = {line.removeprefix("configmap/") for line in names.split()}
        return sorted(acknowledged - present)

    def window(self, since: float, until: float) -> dict[str, Any]:
        """The writer's figures over ``[since, until)``: requests, errors, p99 per operation."""
        figures: dict[str, Any] = {}
        for op in ("create", "get"):
            records = self.records(since, until, op)
            latencies = sorted(r["s"] for r in records if r["code"] in (200, 201))
            errors = [r for r in records if r["code"] not in (200, 201)]
            figures[op] = {
                "requests": len(records),
                "errors": len(errors),
                "p99_s": percentile(latencies, 0.99),
                "codes": sorted({r["code"] for r in errors}),
            }
        return figures

    def failed(self, since: float, until: float = float("inf")) -> list[dict[str, Any]]:
        return [r for r in self.records(since, until) if r["code"] not in (200, 201)]

    def wait_writing(self, since: float, timeout: float) -> float:
        """Waits for a create started after ``since`` to be acknowledged; returns when it started."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            good = [r["t"] for r in self.records(since, op="create") if r["code"] == 201]
            if good:
                return min(good)
            time.sleep(0.5)
        raise TimeoutError(f"no write acknowledged within {timeout:.0f} s after {since:.1f}")


@dataclass
class BackgroundLoad(Writes):
    """The writer through the apiservers' load balancer, and the simulated fleet beside it."""

    fleet: Fleet

    @classmethod
    def start_with_fleet(cls, cluster: Cluster, fleet: Fleet, rate: float, workers: int) -> BackgroundLoad:
        writes = Writes.start(cluster, cluster.admin, cluster.apiserver_url, rate, workers)
        return cls(cluster, writes.writer, fleet)

    def wait_leases_steady(self, timeout: float) -> None:
        """Waits until every fleet process has printed, since the call, a report that counts no failed Lease
        renewal more than the report before it: a whole interval without one."""
        since = time.time()

        def steady(process: Process) -> bool:
            reports = events(process, "report")
            return any(
                later["t"] >= since and later["leaseErrors"] == earlier["leaseErrors"]
                for earlier, later in zip(reports, reports[1:], strict=False)
            )

        wait_for(
            "a fleet report interval without a failed Lease renewal",
            lambda: all(steady(p) for p in self.fleet.processes),
            timeout=timeout,
            interval=1,
        )

    def leases(self, since: float, until: float) -> dict[str, Any]:
        """The fleet's Lease renewals in the reports printed over ``[since, until]``: the worst p99 of any
        report and the renewals that failed."""
        reports = [r for p in self.fleet.processes for r in events(p, "report")]
        inside = [r for r in reports if since <= r["t"] <= until + 1]
        before = [r for r in reports if r["t"] < since]
        first = {"leaseErrors": 0, "leaseRenewals": 0} if not before else before[-1]
        last = inside[-1] if inside else first
        p99s = [r["renewP99Ms"] for r in inside if r.get("renewP99Ms") is not None]
        return {
            "nodes": self.fleet.nodes,
            "renewals": last["leaseRenewals"] - first["leaseRenewals"],
            "errors": last["leaseErrors"] - first["leaseErrors"],
            "worst_p99_s": round(max(p99s) / 1000, 3) if p99s else None,
        }


def start_load(cluster: Cluster, fleet_binary: Path, workdir: Path, nodes: int, rate: float, workers: int):
    """The background load on a booted box: ``nodes`` simulated nodes (prod's pools in proportion), settled,
    then the writer beside them; returns once the first write is acknowledged."""
    fleet = Fleet(cluster, str(fleet_binary), workdir, fleet_pools(cluster))
    fleet.grow(split(fleet.pools, nodes), prefix="faults", timeout=300)
    settle(fleet, quiet=10, timeout=180)
    load = BackgroundLoad.start_with_fleet(cluster, fleet, rate, workers)
    load.wait_writing(0, timeout=60)
    return load


def steady(load: BackgroundLoad, report: dict) -> float:
    """Waits until the fleet has reported a whole interval without a failed Lease renewal (the box has
    recovered from the scenario before: the fleet counts renewals per report, so a window's first report
    may be one interval old), lets the load run untouched for QUIET_S and records its figures there (the
    baseline); returns now."""
    load.wait_leases_steady(timeout=STEADY_TIMEOUT_S)
    start = time.time()
    time.sleep(QUIET_S)
    report.setdefault("baseline", []).append(
        {"writer": load.window(start, time.time()), "leases": load.leases(start, time.time())}
    )
    return time.time()


def record(report: dict, scenario: str, figures: dict) -> None:
    report[scenario] = figures
    print(f"\n{scenario}: {json.dumps(figures)}", flush=True)


def assert_nothing_lost(load: Writes) -> None:
    missing = load.missing()
    assert not missing, f"{len(missing)} acknowledged ConfigMaps are gone: {missing[:10]}"


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


# ---------------------------------------------------------------------------------- losing machines


def processes_on(cluster: Cluster, host: Host) -> list[Process]:
    return [p for p in cluster.network.processes if p.host is host and p.alive()]


def kill(process: Process) -> None:
    """SIGKILL to the process's whole group (its restart loop included): it dies as with its machine."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.popen.pid, signal.SIGKILL)
    process.popen.wait(timeout=30)


def lose(cluster: Cluster, host: Host) -> float:
    """The machine behind ``host`` lost: its NIC down and every process on it killed. Returns when (unix s)."""
    at = time.time()
    subprocess.run(["ip", "-n", host.namespace, "link", "set", "eth0", "down"], check=True, timeout=30)
    for process in processes_on(cluster, host):
        kill(process)
    return at


def bring_back(host: Host) -> None:
    """The lost machine's replacement on its address (the runbook's new VM with the same rendered files)."""
    subprocess.run(["ip", "-n", host.namespace, "link", "set", "eth0", "up"], check=True, timeout=30)


def new_vm(cluster: Cluster, host: Host, machine: Machine, binaries: Path | None = None) -> None:
    """A new VM in place of one lost or deleted, on its fixed address: a fresh disk holding ``machine``'s
    rendered files (the lost machine's for the runbook's repair, the next deploy's for a rollout) and,
    with ``binaries``, another release's binaries (a new machine image)."""
    for relative in MACHINE_PATHS:
        shutil.rmtree(host.root / relative)
        (host.root / relative).mkdir(parents=True)
    install(machine, host, cluster.pki)
    host.binaries = binaries or host.binaries
    bring_back(host)


def fresh_disk(host: Host, path: str) -> Path:
    """An empty filesystem mounted at the machine's ``path``, standing in for a local SSD that came back
    empty (a redeployed VM): a mount point of its own, as the member tool checks before it starts etcd.
    The caller unmounts it once no process uses it (``umount``)."""
    target = host.root / path.lstrip("/")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0700", "tmpfs", str(target)], check=True, timeout=30)
    return target


def umount(target: Path) -> None:
    subprocess.run(["umount", str(target)], check=True, timeout=30)


def load_balancer_changes(load_balancer: Process, backend: str, healthy: bool, since: float) -> list[float]:
    """When a box load balancer (``load_balancer.py``) took ``backend`` (``ip:port``) out (``healthy``
    False) or in, since ``since``."""
    found = []
    for line in load_balancer.output().splitlines():
        if line.startswith("{"):
            change = json.loads(line)
            if change["backend"] == backend and change["healthy"] is healthy and change["t"] >= since:
                found.append(change["t"])
    return found


# ---------------------------------------------------------------------------------- leader election


@dataclass(frozen=True)
class LeaderElection:
    lease_duration_s: float
    retry_period_s: float

    @property
    def failover_budget_s(self) -> float:
        """The longest a standby may take to lead once the leader is gone without releasing its lease. A
        standby times the lease from when it saw the last renewal (client-go leaderelection: observedTime,
        its own clock), up to one jittered retry period after it; the lease must then expire, and the next
        acquire attempt comes within another."""
        return self.lease_duration_s + 2 * ACQUIRE_JITTER * self.retry_period_s


def _seconds(duration: str) -> float:
    """A Go duration as the flags and config write it (``15s``, ``2s``, ``1m0s``)."""
    total, number = 0.0, ""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0}
    for char in duration:
        if char.isdigit() or char == ".":
            number += char
        else:
            total += float(number) * units[char]
            number = ""
    return total


def leader_election(machine: Machine, lease: str) -> LeaderElection:
    """The timings the rendered unit (``kube-controller-manager``) or config (``kube-scheduler``) sets."""
    if lease == "kube-scheduler":
        config = yaml.safe_load((machine.files / SCHEDULER_CONFIG).read_text()).get("leaderElection", {})
        duration, retry = config.get("leaseDuration"), config.get("retryPeriod")
    else:
        flags = dict(a.split("=", 1) for a in machine.unit(f"{lease}.service").exec_start[1:] if "=" in a)
        duration, retry = flags.get("--leader-elect-lease-duration"), flags.get("--leader-elect-retry-period")
    return LeaderElection(
        _seconds(duration) if duration else DEFAULT_LEASE_DURATION_S,
        _seconds(retry) if retry else DEFAULT_RETRY_PERIOD_S,
    )


def lease_holder(cluster: Cluster, lease: str, via: Machine) -> str | None:
    """The machine (host name) holding ``lease`` in kube-system, read from apiserver ``via`` directly
    (not through the load balancer, which may still send to a lost machine)."""
    status, body = cluster.raw(
        f"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{lease}", url=f"https://{via.ip}:6443", timeout=3
    )
    if status != 200:
        return None
    holder = json.loads(body)["spec"].get("holderIdentity") or ""
    return holder.split("_", 1)[0] or None


# ---------------------------------------------------------------------------------- an apiserver VM replaced


def health_answer(cluster: Cluster, probe: dict[str, Any], machine: Machine) -> int:
    """``machine``'s answer (HTTP status, 0 for none) to the scale set's rendered health ``probe`` (its Application
    Health extension's settings), asked as the extension asks: anonymous, at the machine's address."""
    url = f"https://{machine.ip}:{probe['port']}"
    return cluster.raw(probe["requestPath"], anonymous=True, url=url, timeout=2)[0]


def health_signal(cluster: Cluster, machine: Machine, healthy: bool = False, timeout: float = 60) -> float:
    """When (unix s) the apiserver scale set's rendered health signal (its Application Health extension's
    ``requestPath`` on the machine, anonymous, every ``intervalInSeconds``) has answered ``healthy`` (200) or not
    ``numberOfProbes`` times in a row: the state change automatic repairs (unhealthy) and a rolling upgrade's
    next batch (healthy) wait for. Azure's grace period (minutes) is not waited (docs/cluster-in-a-box.md)."""
    probe, seen = cluster.plan.repair_probe(), 0
    deadline = time.time() + timeout + probe["intervalInSeconds"] * probe["numberOfProbes"]
    while seen < probe["numberOfProbes"]:
        state = "healthy" if healthy else "unhealthy"
        assert time.time() < deadline, f"{machine.name}'s health signal never {state} {probe['numberOfProbes']} times"
        asked = time.time()
        answered = health_answer(cluster, probe, machine) == 200
        seen = seen + 1 if answered is healthy else 0
        time.sleep(max(0.0, asked + probe["intervalInSeconds"] - time.time()) if seen < probe["numberOfProbes"] else 0)
    return time.time()


def health_signal_rounds(cluster: Cluster, machines: list[Machine]) -> dict[str, list[int]]:
    """Each machine's answers (HTTP status, 0 for none) to the scale set's rendered health signal over
    ``numberOfProbes`` rounds, ``intervalInSeconds`` apart: as long as the Application Health extension takes to
    call an instance unhealthy, which automatic repairs then replace."""
    probe = cluster.plan.repair_probe()
    answers: dict[str, list[int]] = {m.name: [] for m in machines}
    for round_ in range(probe["numberOfProbes"]):
        asked = time.time()
        for machine in machines:
            answers[machine.name].append(health_answer(cluster, probe, machine))
        if round_ + 1 < probe["numberOfProbes"]:
            time.sleep(max(0.0, asked + probe["intervalInSeconds"] - time.time()))
    return answers


@dataclass
class ApiserverReplaced:
    """An apiserver VM lost, then replaced: the figures a scenario reports, and when each thing happened."""

    figures: dict[str, Any]
    lost_at: float
    down_at: float  # the load balancer took the lost VM out
    back_at: float  # ... and its replacement in
    late: list[dict[str, Any]]  # writer requests that failed after the load balancer took the lost VM out

    def assert_within_budget(self) -> None:
        """Out of the load balancer within its probe's budget, each lease it held moved within its own, and no
        write failed once the load balancer had taken it out."""
        figures = self.figures
        assert figures["detect_s"] <= figures["detect_budget_s"], figures
        for lease, failover in figures["failovers"].items():
            assert failover["seconds"] <= failover["budget_s"], (lease, failover)
        assert not self.late, f"writes failed after the load balancer took {figures['victim']} out: {self.late[:5]}"


def lose_and_replace_apiserver(
    cluster: Cluster,
    load: BackgroundLoad,
    index: int,
    replacement: Machine | None = None,
    binaries: Path | None = None,
) -> ApiserverReplaced:
    """The apiserver at ``index`` lost as a machine is (``lose``); once the load balancer has taken it out, every
    lease it held has moved and the requests caught on it have timed out, a new machine in its place
    (``new_vm``: ``replacement``'s rendered files, default the lost machine's, and ``binaries``) starts the
    control-plane units. Without ``replacement`` that is the box's stand-in for Azure's automatic repair: it
    replaces the instance once the scale set's rendered health signal has failed as often as the extension
    counts (``health_signal``), with the model's files, on the address the lost one freed. Returns once the
    load balancer takes the new machine in."""
    machines = [m for m, _, _ in cluster.control_plane]
    victim, host, _ = cluster.control_plane[index]
    survivor = next(m for m in machines if m is not victim)
    holders = {lease: lease_holder(cluster, lease, survivor) for lease in LEASES}
    backend = f"{victim.ip}:6443"
    probe = cluster.plan.load_balancer("control-plane-lb")["probes"][0]
    # Marked down after probeThreshold failed probes, every intervalInSeconds; the first may come an
    # interval after the loss, and each waits at most the probe timeout.
    detect_budget = probe["intervalInSeconds"] * (probe["probeThreshold"] + 1) + 2

    lost_at = lose(cluster, host)
    try:
        failovers = {}
        for lease, holder in holders.items():
            timing = leader_election(victim, lease)
            if holder != victim.name:
                continue
            new = wait_for(
                f"{lease} to fail over from {victim.name}",
                lambda lease=lease: (h := lease_holder(cluster, lease, survivor)) not in (None, victim.name) and h,
                timeout=timing.failover_budget_s + 30,
                interval=0.5,
            )
            failovers[lease] = {
                "to": new,
                "seconds": round(time.time() - lost_at, 1),
                "budget_s": timing.failover_budget_s,
            }
        (down_at,) = wait_for(
            f"the load balancer to take {backend} out",
            lambda: load_balancer_changes(cluster.load_balancer, backend, False, lost_at),
            timeout=detect_budget + 30,
        )
        # Requests already on a connection to the lost VM wait out their timeout; after that, none fails.
        time.sleep(max(0.0, down_at + WRITER_TIMEOUT_S + QUIET_S - time.time()))
        settled = time.time()
        late = [r for r in load.failed(lost_at, settled) if r["t"] > down_at + 1]
        figures = {
            "victim": victim.name,
            "detect_s": round(down_at - lost_at, 1),
            "detect_budget_s": detect_budget,
            "failovers": failovers,
            "writer": load.window(lost_at, settled),
            "leases": load.leases(lost_at, settled),
            "writer_after": load.window(down_at + WRITER_TIMEOUT_S, settled),
        }
    finally:
        # Azure's automatic repairs replace an instance on the rendered health signal: the box's stand-in too.
        repaired_on = health_signal(cluster, victim) if replacement is None else None
        replaced_at = time.time()
        machine = replacement or victim
        new_vm(cluster, host, machine, binaries)
        cluster.control_plane[index] = (machine, host, start_control_plane_machine(cluster, machine, host))
        (back_at,) = wait_for(
            f"the load balancer to take {backend} back",
            lambda: load_balancer_changes(cluster.load_balancer, backend, True, lost_at),
            timeout=120,
            on_timeout=cluster.describe,
        )
    figures["replacement_in_lb_s"] = round(back_at - replaced_at, 1)
    if repaired_on is not None:
        figures["repair_signal_s"] = round(repaired_on - lost_at, 1)
    return ApiserverReplaced(figures, lost_at, down_at, back_at, late)
