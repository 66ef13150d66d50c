"""How close the offline plan (and so `pulumi preview`/`up`) is to the Pulumi SDK's own floor.

    .venv/bin/python benchmarks/plan_benchmark.py [--skip-tests] [--repeat N]

Prints, from one run on one machine:
- plan wall time and peak memory for dev and prod (whole process: python -m plan, files written);
- the floor: the same number of resources registered as bare custom resources under the same
  mocks (whole process), and the ratio plan / floor;
- scale: prod with its pools resized to 2,500, 7,500 and 30,000 nodes: resources registered,
  wall time, and the ratio to the 2,500-node run;
- the replay: at 2,500 and 30,000 nodes, the plan against a replay of its own ``resources.json``
  (every resource with its type, name, parent and inputs, each machine's customData as the plan sent it,
  registered under the same mocks with nothing computed: ``replay_input``): the SDK's own cost for that
  plan, and the ratio plan / replay (goal: 1.5x), as
  the median over rounds with its range, times as each process's median, and the load average;
- the test suite's wall time.
Processes that are compared run in rounds, one of each per round, ``--repeat`` rounds (default 7).
A shared machine's speed drifts by half from one minute to the next; two processes run back to back
see the same speed, so each ratio is the median over rounds of the two processes' times within a
round. Times shown are each process's fastest run, CPU seconds (user + system) beside wall seconds.
Not part of the test suite's timing.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import pickle
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
# Children keep Python's compiled bytecode, as `pulumi preview` does on a developer's machine or a CI
# runner: some sandboxes set PYTHONDONTWRITEBYTECODE, which would recompile every project module on
# every run (about 0.1 s of a plan). The first run of each process writes the cache.
CHILD_ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
# Plans are written to a RAM disk where there is one: the files are written all the same, but a shared
# VM disk's write latency varies tenfold from one run to the next, and the floor writes nothing.
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None

# The floor exits the way `python -m plan` does (no cyclic GC, heap frozen at exit), so the
# ratio compares the work, not the process policy.
FLOOR_PROGRAM = """
import gc, sys
gc.disable()
import pulumi
from plan.runner import run_declarations
count = int(sys.argv[1])
def declare():
    for i in range(count):
        pulumi.CustomResource("bench:index:Bare", f"r{i}", {"index": i})
run = run_declarations(declare, stack="floor")
assert len(run.registrations) == count
gc.freeze()
"""

# The SDK's cost for one plan: the plan's own resources, with their inputs and parents, registered in the
# order the plan registered them, and nothing else computed. Its input (``replay_input``) is the plan's
# ``resources.json`` with each machine's customData as the plan sent it, pickled so that reading it costs the
# replay as little as it can.
REPLAY_PROGRAM = """
import gc, pickle, sys
gc.disable()
import pulumi
from plan.runner import run_declarations
with open(sys.argv[1], "rb") as given:
    resources = pickle.load(given)
def declare():
    made = {}
    for r in resources:
        options = pulumi.ResourceOptions(parent=made.get(r["parent"]))
        if r["type"].startswith("pulumi:providers:"):
            made[r["urn"]] = pulumi.ProviderResource(r["type"].split(":")[2], r["name"], r["inputs"], options)
        elif r["type"].startswith("supercluster:"):
            made[r["urn"]] = pulumi.ComponentResource(r["type"], r["name"], None, options)
        else:
            made[r["urn"]] = pulumi.CustomResource(r["type"], r["name"], r["inputs"], options)
run = run_declarations(declare, stack="replay")
assert len(run.registrations) == len(resources), (len(run.registrations), len(resources))
gc.freeze()
"""
# What resources.json holds for a machine's customData: where its cloud-init is, and the digest of the base64
# the plan sent (plan/artifacts.py, ``recorded``).
_CUSTOM_DATA_POINTER = re.compile(r"\[base64 of (files/[^,\]]+), sha256 ([0-9a-f]+)\]")


def replay_input(plan: Path, into: Path) -> Path:
    """The replay's input for the plan directory ``plan``, written to ``into``: its ``resources.json`` with each
    machine's customData put back as the plan sent it (the record points at the cloud-init file instead, so
    the replay would otherwise register a scale set without the 40-80 KB the plan sends for it), checked
    against the digest the record keeps."""
    sys.path.insert(0, str(ROOT))
    from plan.artifacts import VM_TYPES

    resources = json.loads((plan / "resources.json").read_text())
    for resource in resources:
        path = VM_TYPES.get(resource["type"])
        if path is None:
            continue
        holder = resource["inputs"]
        for key in path[:-1]:
            holder = holder.get(key) if isinstance(holder, dict) else None
        pointer = _CUSTOM_DATA_POINTER.fullmatch(holder.get(path[-1]) or "") if isinstance(holder, dict) else None
        if pointer is not None:
            sent = base64.b64encode((plan / pointer[1]).read_bytes()).decode()
            assert hashlib.sha256(sent.encode()).hexdigest().startswith(pointer[2]), resource["name"]
            holder[path[-1]] = sent
    with open(into, "wb") as out:
        pickle.dump(resources, out, protocol=pickle.HIGHEST_PROTOCOL)
    return into


@dataclass(frozen=True)
class Run:
    wall: float  # seconds
    cpu: float  # seconds, user + system
    rss: float  # peak MiB


def timed(argv: list[str]) -> Run:
    """One child process, run to its end; its output is discarded, its errors shown if it fails."""
    with tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        process = subprocess.Popen(
            argv, cwd=ROOT, env=CHILD_ENV, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, text=True
        )
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(argv)} failed:\n{err.read()}")
        return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)


def plan_argv(stack: str, out: Path, overrides: list[str] = ()) -> list[str]:
    argv = [PYTHON, "-m", "plan", "--stack", stack, "--out", str(out)]
    for override in overrides:
        argv += ["--config", override]
    return argv


def in_rounds(runs: dict[str, list[str]], repeat: int, fresh: dict[str, Path]) -> dict[str, list[Run]]:
    """Every process's runs, round by round: the processes take turns, ``repeat`` times. ``fresh`` names
    the output directory a process must not find from its previous run (plans are written afresh, as in CI)."""
    runs_by_name: dict[str, list[Run]] = {name: [] for name in runs}
    for _ in range(repeat):
        for name, argv in runs.items():
            if name in fresh and fresh[name].exists():
                shutil.rmtree(fresh[name])
            runs_by_name[name].append(timed(argv))
    return runs_by_name


def fastest(runs: list[Run]) -> Run:
    return min(runs, key=lambda run: run.wall)


def ratio(runs: list[Run], reference: list[Run], measure: str = "wall") -> float:
    """The median, over rounds, of one process's time over another's in the same round."""
    return statistics.median(getattr(a, measure) / getattr(b, measure) for a, b in zip(runs, reference, strict=True))


def spread(runs: list[Run], reference: list[Run], measure: str) -> str:
    """The median of the per-round ratios, with their range: ``1.42x (1.31-1.55)``."""
    ratios = [getattr(a, measure) / getattr(b, measure) for a, b in zip(runs, reference, strict=True)]
    return f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"


def load_average() -> str:
    """The 1-minute load average, to print beside figures from a shared machine."""
    return f"{os.getloadavg()[0]:.1f}"


def registered(out: Path) -> int:
    """Resources a plan registered, components excluded (what the floor registers as bare resources)."""
    return sum(1 for r in json.loads((out / "resources.json").read_text()) if not r["type"].startswith("supercluster:"))


def resized(total: int) -> list[str]:
    """Overrides that scale prod's pools to ``total`` nodes (and lift the IP limits at 30,000)."""
    sys.path.insert(0, str(ROOT))
    from tests.helpers import raw_stack

    pools = raw_stack("prod")["nodePools"]
    current = sum(p["maxNodes"] for p in pools)
    overrides = []
    for i, pool in enumerate(pools):
        size = round(pool["maxNodes"] * total / current)
        overrides += [f"nodePools[{i}].maxNodes={size}", f"nodePools[{i}].minNodes={min(pool['minNodes'], size)}"]
    if total > 7_500:
        # Far past Azure's real limits: this run measures the program's cost, not a deployable cluster.
        overrides += ["network.maxPrivateIpsPerVnet=10000000", "network.maxPrivateIpsPerPeeredGroup=10000000"]
    return overrides


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-tests", action="store_true", help="do not time the test suite")
    parser.add_argument("--repeat", type=int, default=7, help="rounds of runs, each process once per round")
    parser.add_argument("--replay-only", action="store_true", help="only the plan against its replay (and no tests)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=SCRATCH) as tmp:
        work = Path(tmp)
        sizes = {total: work / f"prod-{total}" for total in (2_500, 7_500, 30_000)}
        if args.replay_only:
            for total in (2_500, 30_000):  # one run first: bytecode written, resources.json there to replay
                timed(plan_argv("prod", sizes[total], resized(total)))
        else:
            outs = {stack: work / stack for stack in ("dev", "prod")}
            counts = {}
            for stack, out in outs.items():  # one run first (bytecode written), to count what the floor must register
                timed(plan_argv(stack, out))
                counts[stack] = registered(out)
            timed([PYTHON, "-c", FLOOR_PROGRAM, "1"])
            runs = {stack: plan_argv(stack, out) for stack, out in outs.items()}
            runs.update({f"floor-{stack}": [PYTHON, "-c", FLOOR_PROGRAM, str(counts[stack])] for stack in outs})
            rounds = in_rounds(runs, args.repeat, outs)
            print(
                "| stack | resources | plan wall s (cpu) | peak MiB | floor wall s (cpu), same count | plan / floor |"
            )
            print("|---|---:|---:|---:|---:|---:|")
            for stack in outs:
                plan, floor = fastest(rounds[stack]), fastest(rounds[f"floor-{stack}"])
                print(
                    f"| {stack} | {counts[stack]} | {plan.wall:.2f} ({plan.cpu:.2f}) | {plan.rss:.0f} "
                    f"| {floor.wall:.2f} ({floor.cpu:.2f}) | {ratio(rounds[stack], rounds[f'floor-{stack}']):.2f}x |"
                )
            print()
            rounds = in_rounds(
                {total: plan_argv("prod", out, resized(total)) for total, out in sizes.items()}, args.repeat, sizes
            )
            print("| prod resized to | resources | plan wall s (cpu) | vs 2,500 nodes (cpu) |")
            print("|---|---:|---:|---:|")
            for total, out in sizes.items():
                run, wall, cpu = (
                    fastest(rounds[total]),
                    ratio(rounds[total], rounds[2_500]),
                    ratio(rounds[total], rounds[2_500], "cpu"),
                )
                print(
                    f"| {total:,} nodes | {registered(out)} | {run.wall:.2f} ({run.cpu:.2f}) "
                    f"| {wall:.2f}x ({cpu:.2f}x) |"
                )
        replays = {
            f"replay-{total}": [PYTHON, "-c", REPLAY_PROGRAM, str(replay_input(sizes[total], work / f"{total}.pickle"))]
            for total in (2_500, 30_000)
        }
        plans = {total: plan_argv("prod", sizes[total], resized(total)) for total in (2_500, 30_000)}
        started = load_average()
        rounds = in_rounds({**plans, **replays}, args.repeat, {total: sizes[total] for total in plans})
        print()
        print(
            f"Plan against replay, {args.repeat} rounds, load average {started} at the start, {load_average()} after:"
        )
        print(
            "| prod resized to | plan cpu s (wall) | replay cpu s (wall) | plan / replay, cpu | plan / replay, wall |"
        )
        print("|---|---:|---:|---:|---:|")
        for total in plans:
            plan, replay = rounds[total], rounds[f"replay-{total}"]
            print(
                f"| {total:,} nodes | {statistics.median(r.cpu for r in plan):.2f} "
                f"({statistics.median(r.wall for r in plan):.2f}) | {statistics.median(r.cpu for r in replay):.2f} "
                f"({statistics.median(r.wall for r in replay):.2f}) | {spread(plan, replay, 'cpu')} "
                f"| {spread(plan, replay, 'wall')} |"
            )
    if not args.skip_tests and not args.replay_only:
        # As scripts/test.sh runs it (without its setup step): one worker per core.
        suite = timed([PYTHON, "-m", "pytest", "-n", "auto"])
        print(f"\nTest suite: {suite.wall:.1f} s wall ({suite.cpu:.1f} s cpu)")


if __name__ == "__main__":
    main()
