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
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.cluster import Cluster
from tests.e2e.fleet import Fleet, events
from tests.e2e.hosts import Host, Process, wait_for
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
