"""``python -m infra.plan --stack STACK [--out DIR] [--config KEY=VALUE ...]``

Runs the real program under Pulumi mocks (no cloud credentials, no Pulumi CLI) and
writes what it declares and renders. Exit 0 on success, 2 with one line on bad config,
3 if a secret would have been written (the plan is then not kept).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from infra.cluster import build_cluster_spec
from infra.config import LOCATION_KEY
from infra.errors import NAMESPACE, ConfigError
from infra.plan.artifacts import write_plan
from infra.plan.runner import run_program
from infra.plan.secret_scan import scan_directory
from infra.plan.stackfile import PROJECT_DIR, load_stack_config
from infra.plan.summary import render_summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.plan", description=__doc__.splitlines()[0])
    parser.add_argument("--stack", required=True, help="stack name (reads Pulumi.<stack>.yaml)")
    parser.add_argument("--out", type=Path, help="output directory (default build/plan/<stack>)")
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value like `pulumi config set --path` (repeatable)")
    args = parser.parse_args(argv)
    out = args.out or PROJECT_DIR / "build" / "plan" / args.stack
    try:
        config = load_stack_config(args.stack, args.config)
        run = run_program(args.stack, config)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    spec = build_cluster_spec(_namespace_values(config), config.get(LOCATION_KEY))
    summary = render_summary(args.stack, spec, run.registrations)
    leaks = _write_atomically(out, lambda staging: write_plan(staging, run.registrations, run.outputs, summary))
    if leaks:
        for leak in leaks:
            print(f"error: secret in plan output: {leak.kind} in {leak.path}:{leak.line}", file=sys.stderr)
        return 3
    print(summary, end="")
    print(f"Plan written to {out}")
    return 0


def _namespace_values(config: dict) -> dict:
    prefix = f"{NAMESPACE}:"
    return {key[len(prefix):]: value for key, value in config.items() if key.startswith(prefix)}


def _write_atomically(out: Path, write) -> list:
    """Builds the plan next to ``out`` and swaps it in, so a failed run never leaves half a plan,
    and a plan that would carry a secret is never kept. Returns the secret findings (empty when kept)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        shutil.rmtree(staging)
        write(staging)
        leaks = scan_directory(staging)
        if leaks:
            return leaks
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
        return []
    finally:
        if staging.exists():
            shutil.rmtree(staging)


if __name__ == "__main__":
    sys.exit(main())
