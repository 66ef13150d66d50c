"""The scale proof as plots, next to results.json: where latency crosses the SLO, what the machine spends its
cores on, and what each seed lesson's setting changes. Drawn by matplotlib from results.json alone, so a
reader can redraw them from any run: ``python -m benchmarks.scale.plots RESULTS_JSON``.

- ``scale-latency.png``: lease-renewal p99 and the worst mutating call's p99 against nodes, with the 1 s SLO;
- ``scale-load.png``: requests per second against nodes, and the cores each component kept busy (stacked,
  against the machine's cores);
- ``scale-patterns.png``: each side-by-side load pattern as paired bars (with the rendered setting, without
  it): the bar is the p99, the line through it runs from the p50 to the p99 (a rate has no spread: one
  window's average).

A results.json that lacks a figure a plot needs raises ``PlotDataError`` naming it; nothing is drawn.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from benchmarks.scale.report import SLO_MUTATING_S

LATENCY_PNG = "scale-latency.png"
LOAD_PNG = "scale-load.png"
PATTERNS_PNG = "scale-patterns.png"
WITH, WITHOUT = "#0969da", "#bc4c00"  # the rendered setting, and without it
_SHOWN_COMPONENTS = 5  # the busiest; the rest are summed as "other"


class PlotDataError(ValueError):
    """results.json lacks a figure a plot needs."""


def _need(document: Mapping[str, Any], key: str, where: str) -> Any:
    if not isinstance(document, Mapping) or key not in document:
        raise PlotDataError(f"results.json: {where} has no {key!r}")
    return document[key]


def _value(figure: Any) -> float:
    """A figure as a plotted number: a missing measurement (too few requests) is a gap, not a zero."""
    return float("nan") if figure is None else float(figure)


def write_plots(results: Mapping[str, Any], out: Path) -> list[Path]:
    """Draws the three plots into ``out`` and returns their paths. Checks every figure before drawing any."""
    steps = _need(results, "steps", "the run")
    if not steps:
        raise PlotDataError("results.json: the run has no measured step (no 'steps')")
    series = _step_series(steps)
    pairs = _pattern_pairs(_need(results, "patterns", "the run"))
    cores = _machine_cores(str(results.get("machine", "")))
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / LATENCY_PNG, out / LOAD_PNG, out / PATTERNS_PNG]
    _latency(series, paths[0])
    _load(series, cores, paths[1])
    _patterns(pairs, paths[2])
    return paths


def markdown(paths: list[Path]) -> str:
    """The plots as Markdown images, for table.md beside them."""
    return "\n".join(f"![{path.stem}]({path.name})" for path in paths) + "\n"


# ------------------------------------------------------------------------------------ data


def _step_series(steps: list[Mapping[str, Any]]) -> dict[str, Any]:
    series: dict[str, Any] = {"nodes": [], "lease": [], "mutating": [], "mutating_call": [], "rps": [], "cores": []}
    for index, step in enumerate(steps):
        where = f"steps[{index}]"
        series["nodes"].append(int(_need(step, "nodes", where)))
        series["lease"].append(_value(_need(step, "lease_update_p99_s", where)))
        call, seconds = _need(step, "worst_mutating", where)
        series["mutating"].append(_value(seconds))
        series["mutating_call"].append(call)
        series["rps"].append(_value(_need(step, "requests_per_s", where)))
        series["cores"].append(dict(_need(step, "cores_busy", where)))
    return series


# Each side-by-side pattern: its two runs in results.json, and the figures compared, each as
# (title, unit, [(label, p50 key path or None, p99 or value key path)]).
_PATTERNS = (
    (
        "join burst",
        ("join_burst_paced", "paced"),
        ("join_burst_unpaced", "all at once"),
        (
            ("join latency per node", "s", (("", "registration.p50", "registration.p99"),)),
            ("lease renewal", "s", (("", "lease_update_p50_s?", "lease_update_p99_s"),)),
        ),
    ),
    (
        "Event storm",
        ("event_storm_override_on", "events override"),
        ("event_storm_override_off", "no override"),
        (
            ("Event create latency", "ms", (("", "storm.p50_ms", "storm.p99_ms"),)),
            (
                "etcd writes",
                "puts/s",
                (("main etcd", None, "main_etcd_puts_per_s"), ("events etcd", None, "events_etcd_puts_per_s")),
            ),
        ),
    ),
    (
        "per-node agents LISTing pods",
        ("list_agents_apf_rendered", "rendered APF"),
        ("list_agents_apf_removed", "APF removed"),
        (
            ("agents' LIST latency", "ms", (("", "agents.p50_ms", "agents.p99_ms"),)),
            ("lease renewal", "s", (("", "lease_update_p50_s?", "lease_update_p99_s"),)),
        ),
    ),
)


def _lookup(document: Mapping[str, Any], path: str | None, where: str) -> float | None:
    """The figure at a dotted ``path``; a path ending in ``?`` may be absent (older runs did not record it)."""
    if path is None:
        return None
    optional = path.endswith("?")
    value: Any = document
    for part in path.rstrip("?").split("."):
        if optional and (not isinstance(value, Mapping) or part not in value):
            return None
        value = _need(value, part, where)
    return _value(value)


def _pattern_pairs(patterns: Mapping[str, Any]) -> list[dict[str, Any]]:
    pairs = []
    for title, (with_key, with_label), (without_key, without_label), figures in _PATTERNS:
        runs = [
            (_need(patterns, key, "patterns"), key, label)
            for key, label in ((with_key, with_label), (without_key, without_label))
        ]
        panels = []
        for figure, unit, bars in figures:
            panel = {"title": f"{title}: {figure}", "unit": unit, "groups": [g for g, _, _ in bars], "runs": []}
            for run, key, label in runs:
                values = [
                    (_lookup(run, p50, f"patterns.{key}"), _lookup(run, p99, f"patterns.{key}")) for _, p50, p99 in bars
                ]
                panel["runs"].append((label, values))
            panels.append(panel)
        pairs.append({"title": title, "panels": panels})
    return pairs


def _machine_cores(machine: str) -> int | None:
    match = re.match(r"(\d+) cores", machine)
    return int(match.group(1)) if match else None


# ------------------------------------------------------------------------------------ drawing


def _save(figure: Figure, path: Path) -> None:
    figure.savefig(path, dpi=110, metadata={"Software": None})


def _latency(series: Mapping[str, Any], path: Path) -> None:
    figure = Figure(figsize=(8, 4.5), layout="constrained")
    axes = figure.add_subplot()
    nodes = series["nodes"]
    axes.plot(nodes, series["lease"], marker="o", color=WITH, label="lease renewal (PUT leases) p99")
    axes.plot(nodes, series["mutating"], marker="s", color=WITHOUT, label="worst mutating call p99")
    for x, y, call in zip(nodes, series["mutating"], series["mutating_call"], strict=True):
        if call and y == y:  # not NaN
            axes.annotate(call, (x, y), textcoords="offset points", xytext=(4, 6), fontsize=8, color=WITHOUT)
    axes.axhline(SLO_MUTATING_S, color="#cf222e", linestyle="--", label=f"SLO: mutating p99 ≤ {SLO_MUTATING_S:g} s")
    axes.set_yscale("log")
    axes.set_xlabel("simulated nodes")
    axes.set_ylabel("p99 latency (s, log scale)")
    axes.set_title("Latency against nodes: where the control plane leaves the SLO")
    axes.set_xticks(nodes, [f"{n:,}" for n in nodes])
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(loc="upper left", fontsize=9)
    _save(figure, path)


def _load(series: Mapping[str, Any], cores: int | None, path: Path) -> None:
    figure = Figure(figsize=(11, 4.5), layout="constrained")
    left, right = figure.subplots(1, 2)
    nodes = series["nodes"]
    left.plot(nodes, series["rps"], marker="o", color=WITH)
    left.set_title("API requests per second")
    left.set_xlabel("simulated nodes")
    left.set_ylabel("requests/s (all apiservers)")
    left.set_ylim(bottom=0)
    left.grid(True, alpha=0.3)
    totals: dict[str, float] = {}
    for step in series["cores"]:
        for name, value in step.items():
            totals[name] = totals.get(name, 0.0) + value
    shown = sorted(totals, key=lambda name: -totals[name])[:_SHOWN_COMPONENTS]
    stacks = [[step.get(name, 0.0) for step in series["cores"]] for name in shown]
    labels = list(shown)
    rest = [sum(v for name, v in step.items() if name not in shown) for step in series["cores"]]
    if any(rest):
        stacks.append(rest)
        labels.append("other")
    right.stackplot(nodes, stacks, labels=labels, alpha=0.85)
    if cores is not None:
        right.axhline(cores, color="#cf222e", linestyle="--", label=f"the machine: {cores} cores")
    right.set_title("CPU per component (cores kept busy)")
    right.set_xlabel("simulated nodes")
    right.set_ylabel("cores")
    right.grid(True, alpha=0.3)
    right.legend(loc="upper left", fontsize=8)
    for axes in (left, right):
        axes.set_xticks(nodes, [f"{n:,}" for n in nodes])
    _save(figure, path)


def _patterns(pairs: list[dict[str, Any]], path: Path) -> None:
    figure = Figure(figsize=(11, 3.6 * len(pairs)), layout="constrained")
    grid = figure.subplots(len(pairs), 2, squeeze=False)
    width = 0.38
    for row, pair in zip(grid, pairs, strict=True):
        for axes, panel in zip(row, pair["panels"], strict=True):
            positions = range(len(panel["groups"]))
            for offset, (label, values), color in zip(
                (-width / 2, width / 2), panel["runs"], (WITH, WITHOUT), strict=True
            ):
                xs = [x + offset for x in positions]
                tops = [p99 for _, p99 in values]
                axes.bar(xs, tops, width, color=color, label=label)
                for x, (p50, p99) in zip(xs, values, strict=True):
                    if p50 is not None and p99 == p99:
                        axes.vlines(x, p50, p99, color="black", linewidth=1.5)
                        axes.plot([x], [p50], marker="o", color="black", markersize=4)
                    if p99 == p99:
                        axes.annotate(f"{p99:g}", (x, p99), xytext=(4, 2), textcoords="offset points", fontsize=8)
            spread = any(p50 is not None for _, values in panel["runs"] for p50, _ in values)
            if panel["unit"] == "s" and "lease" in panel["title"]:
                axes.axhline(SLO_MUTATING_S, color="#cf222e", linestyle="--", label=f"SLO {SLO_MUTATING_S:g} s")
            highest = max([p99 for _, values in panel["runs"] for _, p99 in values if p99 == p99] + [0.0])
            axes.set_ylim(0, max(highest, SLO_MUTATING_S if "lease" in panel["title"] else 0.0) * 1.35 or 1)
            axes.set_xlim(-0.75, len(panel["groups"]) - 0.25)
            axes.set_title(panel["title"], fontsize=10)
            axes.set_ylabel(f"{'p99' if spread else 'rate'} ({panel['unit']})")
            axes.set_xticks(list(positions), panel["groups"] if any(panel["groups"]) else [""] * len(panel["groups"]))
            axes.grid(True, axis="y", alpha=0.3)
            axes.legend(
                loc="upper right",
                ncols=3,
                fontsize=8,
                title="line: p50 to p99" if spread else "one window's average: no spread",
                title_fontsize=8,
            )
    figure.suptitle("Each seed lesson's setting, measured with and without it")
    _save(figure, path)


if __name__ == "__main__":
    results_json = Path(sys.argv[1])
    for written in write_plots(json.loads(results_json.read_text()), results_json.parent):
        print(written)
