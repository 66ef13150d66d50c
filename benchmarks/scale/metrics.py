"""Reading the apiservers' and etcd's own metrics: Prometheus text format, counters and histograms.

The scale benchmark takes a snapshot of every component's ``/metrics`` before and after each
measured window and works on the difference, as a Prometheus ``rate()`` or
``histogram_quantile(rate(...))`` over that window would: no Prometheus server is needed, and
the figures are the components' own. Pure functions; tested in tests/benchmarks/test_scale_metrics.py.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass

Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Snapshot:
    """Every sample of one scrape: ``{metric name: {labels: value}}``."""

    samples: Mapping[str, Mapping[Labels, float]]

    def get(self, name: str) -> Mapping[Labels, float]:
        return self.samples.get(name, {})


def parse(text: str) -> Snapshot:
    samples: dict[str, dict[Labels, float]] = defaultdict(dict)
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        name, labels, value = match.groups()
        pairs = tuple(sorted((k, v.replace('\\"', '"').replace("\\\\", "\\")) for k, v in _LABEL.findall(labels or "")))
        samples[name][pairs] = float(value)
    return Snapshot(dict(samples))


def combine(snapshots: Iterable[Snapshot]) -> Snapshot:
    """The sum of several components' samples (five apiservers seen as one control plane)."""
    total: dict[str, dict[Labels, float]] = defaultdict(lambda: defaultdict(float))
    for snapshot in snapshots:
        for name, series in snapshot.samples.items():
            for labels, value in series.items():
                total[name][labels] += value
    return Snapshot({name: dict(series) for name, series in total.items()})


Selector = Callable[[Mapping[str, str]], bool]


def _select(series: Mapping[Labels, float], where: Selector | None) -> dict[Labels, float]:
    return {labels: value for labels, value in series.items() if where is None or where(dict(labels))}


def counter_delta(before: Snapshot, after: Snapshot, name: str, where: Selector | None = None) -> float:
    """How much a counter (summed over the selected series) grew between the snapshots."""
    old, new = _select(before.get(name), where), _select(after.get(name), where)
    return sum(value - old.get(labels, 0.0) for labels, value in new.items())


def gauge(snapshot: Snapshot, name: str, where: Selector | None = None) -> float:
    return sum(_select(snapshot.get(name), where).values())


def histogram_delta(
    before: Snapshot, after: Snapshot, name: str, where: Selector | None = None
) -> list[tuple[float, float]]:
    """``[(upper bound, cumulative count)]`` of the observations made between the snapshots, summed
    over the selected series (the ``le`` label aside), sorted by bound, ``+Inf`` last."""
    groups = histogram_deltas(before, after, name, lambda labels: True if where is None or where(labels) else None)
    return groups.get(True, [])


def histogram_deltas(
    before: Snapshot, after: Snapshot, name: str, group: Callable[[dict[str, str]], Hashable | None]
) -> dict[Hashable, list[tuple[float, float]]]:
    """``histogram_delta`` of every group at once, in one pass over the series: ``group`` maps a series'
    labels (``le`` aside) to its group, or to None to leave the series out."""
    groups: dict[Hashable, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    old = before.get(f"{name}_bucket")
    for labels, value in after.get(f"{name}_bucket").items():
        label_map = dict(labels)
        bound = float(label_map.pop("le"))
        key = group(label_map)
        if key is not None:
            groups[key][bound] += value - old.get(labels, 0.0)
    return {key: sorted(buckets.items()) for key, buckets in groups.items()}


def quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """``histogram_quantile``: linear interpolation inside the bucket that holds the q-th observation.
    None when nothing was observed; the highest finite bound when it falls in ``+Inf``."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    previous_bound, previous_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return previous_bound
            if count == previous_count:
                return bound
            return previous_bound + (bound - previous_bound) * (rank - previous_count) / (count - previous_count)
        previous_bound, previous_count = bound, count
    return previous_bound


def observations(buckets: list[tuple[float, float]]) -> float:
    return buckets[-1][1] if buckets else 0.0


def watches_by_resource(snapshot: Snapshot) -> dict[str, int]:
    """Watches an apiserver serves now, by resource: its ``apiserver_longrunning_requests`` gauge, verb WATCH."""
    found: dict[str, int] = {}
    for labels, value in snapshot.get("apiserver_longrunning_requests").items():
        label = dict(labels)
        if label.get("verb") == "WATCH" and value:
            resource = label.get("resource", "")
            found[resource] = found.get(resource, 0) + int(value)
    return found
