"""The join-burst pattern's arithmetic: the rendered pacing as fleet flags, the run order, the table.

The rendered pacing is two settings (docs/control-plane.md): the cluster autoscaler adds at most
``--max-nodes-per-scaleup`` nodes per loop, one loop per ``--scan-interval``; and the joining nodes'
Node creates fall into the ``supercluster-node-joins`` priority level instead of ``node-high``. The
benchmark reads both from the rendered objects, so it measures what the cluster receives.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from infra.addons.cluster_autoscaler import NAME as AUTOSCALER
from infra.control_plane.flowcontrol import JOIN_LEVEL

PACED, UNPACED = "paced", "unpaced"


@dataclass(frozen=True)
class Pacing:
    per_scaleup: int  # --max-nodes-per-scaleup
    interval_s: float  # --scan-interval

    def fleet_flags(self) -> list[str]:
        """fleet's registration token bucket: ``per_scaleup`` at once, then ``per_scaleup`` per ``interval_s``.
        The autoscaler releases ``per_scaleup`` at each loop; the bucket releases the same number at the start
        and the rest evenly, so a burst of k x ``per_scaleup`` nodes ends at the same second as k loops do."""
        return [f"--register-qps={self.per_scaleup / self.interval_s:g}", f"--register-burst={self.per_scaleup}"]


def rendered_pacing(documents: Iterable[Mapping[str, Any]]) -> Pacing:
    """The pacing the rendered autoscaler Deployment's command carries."""
    for document in documents:
        if document.get("kind") == "Deployment" and document["metadata"]["name"] == AUTOSCALER:
            command = document["spec"]["template"]["spec"]["containers"][0]["command"]
            flags = dict(a.removeprefix("--").split("=", 1) for a in command if a.startswith("--") and "=" in a)
            return Pacing(int(flags["max-nodes-per-scaleup"]), float(flags["scan-interval"].removesuffix("s")))
    raise LookupError(f"no {AUTOSCALER} Deployment among the rendered objects")


def join_level(documents: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rendered FlowSchema and PriorityLevelConfiguration that take joining nodes' requests."""
    found = [
        d
        for d in documents
        if d.get("kind") in ("FlowSchema", "PriorityLevelConfiguration") and d["metadata"]["name"] == JOIN_LEVEL
    ]
    if len(found) != 2:
        raise LookupError(f"{len(found)} rendered objects named {JOIN_LEVEL}, expected a FlowSchema and its level")
    return found


def order(first: str, runs: int) -> list[str]:
    """``runs`` bursts, the modes alternating, starting with ``first``: paced, unpaced, paced, ..."""
    other = UNPACED if first == PACED else PACED
    return [first if i % 2 == 0 else other for i in range(runs)]


FIGURES = (
    ("join p99", "s", lambda r: (r.get("registration") or {}).get("p99")),
    ("lease update p99", "s", lambda r: r.get("lease_update_p99_s")),
    ("node-high wait p99", "s", lambda r: r.get("node_high_wait_p99_s")),
    ("429s", "", lambda r: r.get("http_429")),
)


def spread(values: Sequence[float | None]) -> str:
    """The median, and the smallest and largest value, of the runs that have the figure: with a few runs on a
    shared machine one slow run moves a mean, not a median."""
    present = [v for v in values if v is not None]
    if not present:
        return "n/a"
    if len(present) == 1:
        return f"{present[0]:.3g} (one run)"
    return f"{statistics.median(present):.3g} ({min(present):.3g}-{max(present):.3g})"


def render(runs: Sequence[Mapping[str, Any]]) -> str:
    """One row per run, in the order run, then the median and range of each mode."""
    lines = [
        "| run | mode | nodes before | burst | join p99 | lease update p99 | node-high wait p99 | 429s | "
        "settled after | load (1 min) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for index, run in enumerate(runs, 1):
        cells = []
        for _, unit, read in FIGURES:
            value = read(run)
            cells.append("n/a" if value is None else f"{value:.3f} {unit}".strip() if unit else f"{int(value)}")
        settle = run.get("settle")
        settled = (
            f"{settle['seconds']} s" + ("" if settle["settled"] else " (**not** settled)") if settle else "not waited"
        )
        lines.append(
            f"| {index} | {run['mode']} | {run['nodes_before']:,} | {run['burst']} | {' | '.join(cells)} | "
            f"{settled} | {run['load_1m']:.1f} |"
        )
    lines += ["", "| mode | runs | " + " | ".join(f"{name} median (range)" for name, _, _ in FIGURES) + " |"]
    lines.append("|---|---:|" + "---:|" * len(FIGURES))
    for mode in (PACED, UNPACED):
        chosen = [r for r in runs if r["mode"] == mode]
        if chosen:
            values = [spread([read(r) for r in chosen]) for _, _, read in FIGURES]
            lines.append(f"| {mode} | {len(chosen)} | {' | '.join(values)} |")
    return "\n".join(lines) + "\n"


def median_run(runs: Sequence[Mapping[str, Any]], mode: str) -> Mapping[str, Any] | None:
    """The run of ``mode`` with the median lease p99 (the lower of two middles): what the plots draw."""
    chosen = sorted((r for r in runs if r["mode"] == mode), key=lambda r: r.get("lease_update_p99_s") or 0.0)
    return chosen[(len(chosen) - 1) // 2] if chosen else None
