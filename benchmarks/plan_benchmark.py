"""How close the offline plan (and so `pulumi preview`/`up`) is to the Pulumi SDK's own floor.

    .venv/bin/python benchmarks/plan_benchmark.py [--skip-tests]

Prints, from one run on one machine:
- plan wall time and peak memory for dev and prod (whole process: python -m infra.plan, files written);
- the floor: the same number of resources registered as bare custom resources under the same
  mocks (whole process), and the ratio plan / floor;
- scale: prod with its pools resized to 2,500, 7,500 and 30,000 nodes: resources registered,
  wall time, and the ratio to the 2,500-node run;
- the test suite's wall time.
Not part of the test suite's timing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable

FLOOR_PROGRAM = """
import sys
import pulumi
from infra.plan.runner import run_declarations
count = int(sys.argv[1])
def declare():
    for i in range(count):
        pulumi.CustomResource("bench:index:Bare", f"r{i}", {"index": i})
run = run_declarations(declare, stack="floor")
assert len(run.registrations) == count
"""


def timed(argv: list[str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS MiB, stdout) of one child process."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    out = process.stdout.read()
    err = process.stderr.read()
    process.stdout.close()
    process.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{err}")
    return wall, usage.ru_maxrss / 1024, out


def plan(stack: str, out: Path, overrides: list[str] = ()) -> tuple[float, float, int]:
    argv = [PYTHON, "-m", "infra.plan", "--stack", stack, "--out", str(out)]
    for override in overrides:
        argv += ["--config", override]
    wall, rss, _ = timed(argv)
    resources = json.loads((out / "resources.json").read_text())
    return wall, rss, sum(1 for r in resources if not r["type"].startswith("supercluster:"))


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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rows = {stack: plan(stack, work / stack) for stack in ("dev", "prod")}
        print("| stack | resources | plan wall s | peak MiB | floor wall s (same count) | plan / floor |")
        print("|---|---:|---:|---:|---:|---:|")
        for stack, (wall, rss, count) in rows.items():
            floor_wall, _, _ = timed([PYTHON, "-c", FLOOR_PROGRAM, str(count)])
            print(f"| {stack} | {count} | {wall:.2f} | {rss:.0f} | {floor_wall:.2f} | {wall / floor_wall:.2f}x |")
        print()
        print("| prod resized to | resources | plan wall s | vs 2,500 nodes |")
        print("|---|---:|---:|---:|")
        base = None
        for total in (2_500, 7_500, 30_000):
            wall, _, count = plan("prod", work / f"prod-{total}", resized(total))
            base = base or wall
            print(f"| {total:,} nodes | {count} | {wall:.2f} | {wall / base:.2f}x |")
    if not args.skip_tests:
        wall, _, _ = timed([PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider"])
        print(f"\nTest suite: {wall:.1f} s wall")


if __name__ == "__main__":
    main()
