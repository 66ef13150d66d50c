"""How close the offline plan (and so `pulumi preview`/`up`) is to the Pulumi SDK's own floor.

    .venv/bin/python benchmarks/plan_benchmark.py [--skip-tests] [--repeat N]

Prints, from one run on one machine:
- plan wall time and peak memory for dev and prod (whole process: python -m infra.plan, files written);
- the floor: the same number of resources registered as bare custom resources under the same
  mocks (whole process), and the ratio plan / floor; next to it, what merely importing the SDK
  modules the plan loads costs (a share of the plan no program change can remove);
- scale: prod with its pools resized to 2,500, 7,500 and 30,000 nodes: resources registered,
  wall time, and the ratio to the 2,500-node run;
- the test suite's wall time.
Every process is run ``--repeat`` times (default 3) and the fastest kept: on a shared machine the
slowest runs measure the neighbours. CPU seconds (user + system) are shown beside wall seconds.
Not part of the test suite's timing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable

# Both reference processes exit the way `python -m infra.plan` does (no cyclic GC, heap frozen at
# exit), so the ratios compare the work, not the process policy.
FLOOR_PROGRAM = """
import gc, sys
gc.disable()
import pulumi
from infra.plan.runner import run_declarations
count = int(sys.argv[1])
def declare():
    for i in range(count):
        pulumi.CustomResource("bench:index:Bare", f"r{i}", {"index": i})
run = run_declarations(declare, stack="floor")
assert len(run.registrations) == count
gc.freeze()
"""
# The modules a dev plan loads, one per line in the order it loaded them: what IMPORTS_PROGRAM imports alone.
MODULES_PROGRAM = """
import sys
from infra.plan.runner import run_program
from infra.plan.stackfile import load_stack_config
run_program("dev", load_stack_config("dev", []))
print(" ".join(m for m in sys.modules if m.split(".")[0] in ("pulumi", "pulumi_azure_native", "pulumi_kubernetes",
                                                             "pulumi_tls", "pulumi_random", "components", "infra")))
"""
IMPORTS_PROGRAM = """
import gc, importlib, sys
gc.disable()
for module in sys.stdin.read().split():
    importlib.import_module(module)
gc.freeze()
"""


def timed(argv: list[str], stdin: str = "") -> tuple[float, float, float, str]:
    """(wall seconds, CPU seconds, peak RSS MiB, stdout) of one child process."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err, \
            tempfile.TemporaryFile("w+") as given:
        given.write(stdin)
        given.seek(0)
        start = time.perf_counter()
        process = subprocess.Popen(argv, cwd=ROOT, stdin=given, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if process.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed:\n{err.read()}")
        return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out.read()


def fastest(argv: list[str], repeat: int, stdin: str = "") -> tuple[float, float, float, str]:
    """The run with the least wall time out of ``repeat``."""
    return min((timed(argv, stdin) for _ in range(repeat)), key=lambda run: run[0])


def plan(stack: str, out: Path, repeat: int, overrides: list[str] = ()) -> tuple[float, float, float, int]:
    """(wall s, CPU s, peak MiB, resources registered) of the fastest ``python -m infra.plan`` run."""
    argv = [PYTHON, "-m", "infra.plan", "--stack", stack, "--out", str(out)]
    for override in overrides:
        argv += ["--config", override]
    runs = []
    for _ in range(repeat):
        if out.exists():
            shutil.rmtree(out)  # every run writes a fresh plan, as in CI
        runs.append(timed(argv))
    wall, cpu, rss, _ = min(runs, key=lambda run: run[0])
    resources = json.loads((out / "resources.json").read_text())
    return wall, cpu, rss, sum(1 for r in resources if not r["type"].startswith("supercluster:"))


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
    parser.add_argument("--repeat", type=int, default=3, help="runs of each process; the fastest is kept")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rows = {stack: plan(stack, work / stack, args.repeat) for stack in ("dev", "prod")}
        modules = timed([PYTHON, "-c", MODULES_PROGRAM])[3]
        imports_wall, imports_cpu, _, _ = fastest([PYTHON, "-c", IMPORTS_PROGRAM], args.repeat, modules)
        print("| stack | resources | plan wall s (cpu) | peak MiB | floor wall s (cpu), same count | plan / floor "
              "| SDK imports alone wall s (cpu) |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for stack, (wall, cpu, rss, count) in rows.items():
            floor_wall, floor_cpu, _, _ = fastest([PYTHON, "-c", FLOOR_PROGRAM, str(count)], args.repeat)
            print(f"| {stack} | {count} | {wall:.2f} ({cpu:.2f}) | {rss:.0f} | {floor_wall:.2f} ({floor_cpu:.2f}) "
                  f"| {wall / floor_wall:.2f}x | {imports_wall:.2f} ({imports_cpu:.2f}) |")
        print()
        print("| prod resized to | resources | plan wall s (cpu) | vs 2,500 nodes (cpu) |")
        print("|---|---:|---:|---:|")
        base = None
        for total in (2_500, 7_500, 30_000):
            wall, cpu, _, count = plan("prod", work / f"prod-{total}", args.repeat, resized(total))
            base = base or (wall, cpu)
            print(f"| {total:,} nodes | {count} | {wall:.2f} ({cpu:.2f}) | {wall / base[0]:.2f}x ({cpu / base[1]:.2f}x) |")
    if not args.skip_tests:
        # As scripts/test.sh runs it (without its setup step): one worker per core.
        wall, cpu, _, _ = timed([PYTHON, "-m", "pytest", "-n", "auto"])
        print(f"\nTest suite: {wall:.1f} s wall ({cpu:.1f} s cpu)")


if __name__ == "__main__":
    main()
