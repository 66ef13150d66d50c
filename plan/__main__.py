"""``python -m plan --stack STACK [--out DIR] [--config KEY=VALUE ...] [--config-file FILE] [--diff OLD_DIR]``

Runs the real program under Pulumi mocks (no cloud credentials, no Pulumi CLI) and
writes what it declares and renders. Exit 0 on success, 2 with one line on bad config,
3 if a secret would have been written (the plan is then not kept).

With ``--diff OLD_DIR`` it then compares the new plan with an earlier one (OLD_DIR may be
the output directory itself: it is read first), prints the diff and writes it to
``<out>/diff.md``. OLD_DIR stands for the last deploy: its ``outputs.json`` is what the
program reads as its own stack's previous outputs (a pool dropped without being retired
there is refused, exit 2), unless ``--stack-outputs`` gives that stack's outputs.
Exit 0: nothing changed; 1: something changed; 4: something changed that replaces,
deletes or unprotects a protected or stateful resource, takes more than one control-plane,
etcd or NAT machine down, or sends a capacity to a live scale set; 2 when OLD_DIR is not a plan;
2 and 3 as above.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import sys
import tempfile
from pathlib import Path

from infra.addressing import plan_addresses
from infra.config import LOCATION_KEY, parse_config
from infra.errors import ConfigError
from plan.artifacts import plan_files, write_plan
from plan.diff import PlanDiff, PlanDirectoryError, diff_plans, load_plan
from plan.diff_report import render_diff
from plan.runner import own_stack_name, run_program
from plan.secret_scan import scan_files
from plan.stackfile import PROJECT_DIR, load_stack_config, load_stack_outputs, namespace_values
from plan.summary import render_summary
from plan.topology import diff_section

EXIT_OK = 0  # plan written; with --diff: nothing changed
EXIT_CHANGED = 1  # --diff: something changed
EXIT_BAD_INPUT = 2  # bad config, unknown stack, or --diff OLD_DIR is not a plan
EXIT_SECRET_LEAK = 3  # a secret would have been written; the plan is not kept
EXIT_DANGER = 4  # --diff: a stateful resource replaced, deleted or unprotected, machines of a role down, a pool resized


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m plan", description=__doc__.splitlines()[0])
    parser.add_argument("--stack", required=True, help="stack name (reads Pulumi.<stack>.yaml)")
    parser.add_argument("--out", type=Path, help="output directory (default build/plan/<stack>)")
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value like `pulumi config set --path` (repeatable)",
    )
    parser.add_argument(
        "--config-file",
        type=Path,
        metavar="FILE",
        help="read the stack's config from FILE instead of Pulumi.<stack>.yaml (as pulumi --config-file)",
    )
    parser.add_argument(
        "--stack-outputs",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="YAML/JSON {org/project/stack: {output: value}} answering StackReferences "
        "(default: example outputs for the hub stack, marked as such in the summary)",
    )
    parser.add_argument(
        "--diff",
        type=Path,
        metavar="OLD_DIR",
        help="compare with an earlier plan directory; exit 0 unchanged, 1 changed, "
        "4 changed with a protected/stateful resource replaced, deleted or unprotected, more "
        "than one machine of a role down, or a live pool resized",
    )
    args = parser.parse_args(argv)
    out = args.out or PROJECT_DIR / "build" / "plan" / args.stack
    try:
        old = load_plan(args.diff) if args.diff is not None else None
        config = load_stack_config(args.stack, args.config, config_file=args.config_file)
        stack_outputs = load_stack_outputs(args.stack_outputs)
        if old is not None:
            # The earlier plan stands for the last deploy: its outputs answer the program's reference to itself.
            stack_outputs.setdefault(own_stack_name(args.stack), old.outputs)
        run = run_program(args.stack, config, stack_outputs)
    except (ConfigError, PlanDirectoryError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    # The program validated this config already; the summary needs only its parsed form and address plan.
    parsed = parse_config(namespace_values(config), config.get(LOCATION_KEY))
    addresses = plan_addresses(parsed)
    summary = render_summary(args.stack, parsed, addresses, run.registrations, example_stacks=run.example_stacks)
    files = plan_files(run.registrations, run.outputs, summary)
    leaks = scan_files(files, run.secret_values)
    if leaks:
        for leak in leaks:
            print(f"error: secret in plan output: {leak.kind} in {leak.path}:{leak.line}", file=sys.stderr)
        return EXIT_SECRET_LEAK
    _write_atomically(out, lambda staging: write_plan(staging, files))
    if old is None:
        print(summary, end="")
        print(f"Plan written to {out}")
        return EXIT_OK
    new = load_plan(out)
    diff = diff_plans(old, new)
    report = render_diff(args.stack, str(args.diff), diff, topology=diff_section(old, new, diff, addresses))
    (out / "diff.md").write_text(report)
    print(report, end="")
    print(f"Plan written to {out}, diff to {out / 'diff.md'}")
    return exit_code(diff)


def exit_code(diff: PlanDiff) -> int:
    return EXIT_DANGER if diff.dangers else EXIT_CHANGED if diff.changed else EXIT_OK


def _write_atomically(out: Path, write) -> None:
    """Builds the plan next to ``out`` and swaps it in, so a failed run never leaves half a plan."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        shutil.rmtree(staging)
        write(staging)
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    finally:
        if staging.exists():
            shutil.rmtree(staging)


if __name__ == "__main__":
    # A short-lived process whose heap is mostly long-lived: the SDK modules' ~300,000 objects and, while
    # the program runs, an Output per property of every resource. Cyclic GC would rescan it over and over
    # for almost no garbage, and tearing it down at exit takes longer than planning prod's network (~1 s);
    # frozen objects are left for the OS to reclaim. Measured in docs/performance.md.
    gc.disable()
    code = main()
    gc.freeze()
    sys.exit(code)
