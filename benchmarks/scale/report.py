"""The scale proof's table: each figure beside the SLO or seed figure it is judged by."""

from __future__ import annotations

from typing import Any

from benchmarks.scale import joins
from infra.catalog.vm_sizes import VM_SIZES

# Kubernetes scalability SLOs (kubernetes/community sig-scalability/slos/slos.md), p99 over a window.
SLO_MUTATING_S = 1.0  # mutating API calls, p99 <= 1 s
SLO_GET_S = 1.0  # single-object reads, p99 <= 1 s
SLO_LIST_CLUSTER_S = 30.0  # cluster-scoped LISTs, p99 <= 30 s
SLO_POD_STARTUP_S = 5.0  # pod start-up, p99 <= 5 s
SEED_HEAP_GB_AT_7500 = 70  # the 7,500-node post: up to 70 GB of heap per apiserver
PROD_APISERVER_VM = "Standard_E64ds_v5"


def _s(value: float | None, unit: str = "s", digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f} {unit}"


def _verdict(value: float | None, limit: float) -> str:
    return "n/a" if value is None else ("within" if value <= limit else "**over**")


def _busiest(figures: dict[str, Any], top: int = 3) -> str:
    """The components that kept the most cores busy over the window: where the machine saturates."""
    cores = figures.get("cores_busy") or {}
    return ", ".join(f"{name} {value:.2f}" for name, value in list(cores.items())[:top])


def _watches(figures: dict[str, Any]) -> str:
    """Watches open on each apiserver (mean, lowest-highest), and the resources most watched in all."""
    per = figures.get("watchers_per_apiserver")
    if not per:
        return "n/a"
    top = sorted((figures.get("watchers_by_resource") or {}).items(), key=lambda item: -item[1])[:4]
    return (
        f"{sum(per) / len(per):,.0f} ({min(per):,}-{max(per):,}): "
        + ", ".join(f"{resource} {count:,}" for resource, count in top)
        + " in all"
    )


def _ratio(with_setting: float | None, without: float | None) -> str:
    """A measured difference, stated as a number: what a reader judges, not a claim."""
    return "n/a" if not with_setting or not without else f"{with_setting / without:.2f}x"


def heap_slope(steps: list[dict[str, Any]]) -> float | None:
    """GiB of apiserver heap per 1,000 nodes, between the smallest and largest step measured."""
    if len(steps) < 2 or steps[-1]["nodes"] == steps[0]["nodes"]:
        return None
    return (
        (steps[-1]["apiserver_heap_gib_mean"] - steps[0]["apiserver_heap_gib_mean"])
        / (steps[-1]["nodes"] - steps[0]["nodes"])
        * 1000
    )


def render(results: dict[str, Any]) -> str:
    lines = [
        f"Machine: {results.get('machine')}; prod control plane booted in {results.get('boot_s')} s; "
        f"whole run {results.get('total_s')} s.",
        "",
    ]
    if results.get("stopped"):
        lines += [f"Growth stopped: {results['stopped']}.", ""]
    lines += [
        "| nodes | join p99 | lease update p99 (SLO 1 s) | worst mutating p99 | worst GET p99 | "
        "worst cluster LIST p99 (SLO 30 s) | 429s | req/s | apiserver heap (mean) | etcd DB | "
        "etcd commit p99 | main etcd puts/s | watches per apiserver | busiest (cores) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for step in results.get("steps", []):
        registration = step.get("registration") or {}
        lines.append(
            f"| {step['nodes']:,} | {_s(registration.get('p99'))} | {_s(step['lease_update_p99_s'])} "
            f"({_verdict(step['lease_update_p99_s'], SLO_MUTATING_S)}) | {step['worst_mutating'][0]} "
            f"{_s(step['worst_mutating'][1])} | {step['worst_get'][0]} {_s(step['worst_get'][1])} | "
            f"{step['worst_cluster_list'][0]} {_s(step['worst_cluster_list'][1])} | {int(step['http_429'])} | "
            f"{step['requests_per_s']} | {step['apiserver_heap_gib_mean']} GiB | {step['etcd_db_mib']} MiB | "
            f"{step['etcd_commit_p99_ms']} ms | {step['main_etcd_puts_per_s']} | {_watches(step)} | {_busiest(step)} |"
        )
    slope = heap_slope(results.get("steps", []))
    if slope is not None:
        first = results["steps"][0]
        projected = first["apiserver_heap_gib_mean"] + slope * (7500 - first["nodes"]) / 1000
        memory = VM_SIZES[PROD_APISERVER_VM].memory_gib
        lines += [
            "",
            f"Apiserver heap grows {slope:.2f} GiB per 1,000 nodes (mean of the 5 apiservers); projected "
            f"at 7,500 nodes: {projected:.1f} GiB, against the seed's up to {SEED_HEAP_GB_AT_7500} GB and "
            f"the rendered {PROD_APISERVER_VM}'s {memory} GiB. Simulated nodes carry no pods beyond the "
            f"benchmark's, so this is a floor.",
        ]
    patterns = results.get("patterns") or {}
    if any(key in patterns for key in ("job_burst", "event_storm_override_on", "list_agents_apf_rendered")):
        lines += ["", "| pattern | with the rendered setting | without it | measured difference |", "|---|---|---|---|"]
        job = patterns.get("job_burst")
        if job:
            lines.append(
                f"| job burst: {job['pods']} pods, a gang of {job['gang']} whole GPU nodes | all bound in "
                f"{job['all_bound_s']} s ({job['pods_per_s']} pods/s), "
                f"start-up p99 {_s(job['startup_p99_s'], digits=0)} "
                f"({_verdict(job['startup_p99_s'], SLO_POD_STARTUP_S)} the 5 s SLO) | | the gang bound whole |"
            )
        on, off = patterns.get("event_storm_override_on"), patterns.get("event_storm_override_off")
        if on and off:
            lines.append(
                f"| Event storm, {on['storm']['requests']} events | main etcd {on['main_etcd_puts_per_s']} puts/s, "
                f"events etcd {on['events_etcd_puts_per_s']} puts/s, create p99 {on['storm']['p99_ms']} ms | main "
                f"etcd {off['main_etcd_puts_per_s']} puts/s, events etcd {off['events_etcd_puts_per_s']} puts/s, "
                f"create p99 {off['storm']['p99_ms']} ms | main etcd writes with/without "
                f"{_ratio(on['main_etcd_puts_per_s'], off['main_etcd_puts_per_s'])} |"
            )
        on, off = patterns.get("list_agents_apf_rendered"), patterns.get("list_agents_apf_removed")
        if on and off:
            lines.append(
                f"| per-node agents LISTing pods cluster-wide ({on['agents']['requests']} LISTs) | lease update p99 "
                f"{_s(on['lease_update_p99_s'])}, agents' LIST p99 {on['agents']['p99_ms']} ms, agents' 429s "
                f"{on['agents']['codes'].get('429', 0)} | lease update p99 {_s(off['lease_update_p99_s'])}, agents' "
                f"LIST p99 {off['agents']['p99_ms']} ms, 429s {off['agents']['codes'].get('429', 0)} | lease p99 "
                f"with/without {_ratio(on['lease_update_p99_s'], off['lease_update_p99_s'])} |"
            )
    if patterns.get("join_bursts"):
        lines += ["", "Join bursts, in the order run:", "", joins.render(patterns["join_bursts"])]
    return "\n".join(lines) + "\n"
