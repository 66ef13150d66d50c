"""``python -m plan --stack STACK [--out DIR] [--config KEY=VALUE ...] [--config-file FILE] [--diff OLD_DIR]``

Runs the real program under Pulumi mocks (no cloud credentials, no Pulumi CLI) and
writes what it declares and renders. Exit 0 on success, 2 with one line on bad config,
3 if a secret would have been written (the plan is then not kept).

With ``--diff OLD_DIR`` it then compares the new plan with an earlier one (OLD_DIR may be
the output directory itself: it is read first), prints the diff and writes it to
``<out>/diff.md``. OLD_DIR stands for the last deploy: its ``outputs.json`` is what the
program reads as its own stack's previous outputs (a pool dropped without being retired
there is refused, exit 2), unless ``--stack-outputs`` gives that stack's outputs. The program asks
Azure where the apiserver scale set's rolling upgrade stands; offline it takes it as finished, unless
``--apiserver-rollout FILE`` gives it (what ``az`` reports: ``rolling_upgrade_file``).
Exit 0: nothing changed; 1: something changed; 4: something changed that replaces,
deletes or unprotects a protected or stateful resource, takes more than one control-plane,
etcd or NAT machine down, or sends a capacity to a live scale set; 2 when OLD_DIR is not a plan;
2 and 3 as above.
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from infra.config.cluster_config import LOCATION_KEY, ClusterConfig, parse_config
from infra.config.errors import ConfigError
from infra.day2.deploy_rules import RollingUpgrade
from infra.day2.previous_outputs import check_previous_outputs
from infra.network.addressing import plan_addresses
from plan.artifacts import PLAN_MARKER, cloud_init_pieces, holds_plan, plan_files, write_plan
from plan.diff import PlanDiff, PlanDirectoryError, diff_plans, load_plan
from plan.diff_report import render_diff
from plan.runner import ROLLOUT_FINISHED, ProgramHung, own_stack_name, run_program
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
        "--apiserver-rollout",
        type=Path,
        metavar="FILE",
        help="JSON {latest: ..., latestModelApplied: [...]}: where the apiserver scale set's rolling upgrade "
        "stands, as az reports it (default: finished)",
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
        check_out(out)
        old = load_plan(args.diff) if args.diff is not None else None
        config = load_stack_config(args.stack, args.config, config_file=args.config_file)
        parsed = parse_config(namespace_values(config), config.get(LOCATION_KEY))
        stack_outputs = given_stack_outputs(args.stack, parsed, load_stack_outputs(args.stack_outputs))
        if old is not None:
            # The earlier plan stands for the last deploy: its outputs answer the program's reference to itself.
            source = f"--diff {args.diff / 'outputs.json'}"
            stack_outputs.setdefault(
                own_stack_name(args.stack), dict(check_previous_outputs(old.outputs, source, required=True))
            )
        rolling = rolling_upgrade_file(args.apiserver_rollout) if args.apiserver_rollout else ROLLOUT_FINISHED
        run = run_program(args.stack, config, stack_outputs, rolling)
    except (ConfigError, PlanDirectoryError, ProgramHung) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    addresses = plan_addresses(parsed)
    summary = render_summary(args.stack, parsed, addresses, run.registrations, example_stacks=run.example_stacks)
    files = plan_files(run.registrations, run.outputs, summary, run.encoded, run.write_files)
    leaks = scan_files(files, run.secret_values, cloud_init_pieces(run.encoded, run.write_files))
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


def check_out(out: Path) -> None:
    """``--out`` may name a new path or a folder holding a plan this program wrote (``PLAN_MARKER``): only
    such a folder is replaced. Anything else that exists (``.``, a home directory, a file, a link) is refused,
    never deleted."""
    if out.exists() or out.is_symlink():
        if not holds_plan(out):
            raise ConfigError(
                "--out",
                str(out),
                f"a new path or a folder holding a plan this program wrote (with {PLAN_MARKER}); "
                "this one is left as it is",
            )
        return
    parent = next(p for p in out.absolute().parents if p.exists() or p.is_symlink())
    if not parent.is_dir():
        raise ConfigError("--out", str(out), f"a path inside a folder ({parent} is not a folder)")


def given_stack_outputs(
    stack: str, config: ClusterConfig, given: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """``--stack-outputs``, each stack one this program reads: its own (the last deploy, checked against
    what it exports) or the hub it peers to (checked by the program against the hub's contract)."""
    own = own_stack_name(stack)
    reads = [own] + ([config.network.hub.stack] if config.network.hub.stack else [])
    for name, outputs in given.items():
        if name not in reads:
            raise ConfigError("--stack-outputs", name, "outputs of a stack this program reads: " + " or ".join(reads))
        if name == own:
            # An empty object here is stated, not fallen back to: this stack has not been deployed yet.
            check_previous_outputs(outputs, f"--stack-outputs {own}")
    return dict(given)


def rolling_upgrade_file(path: Path) -> RollingUpgrade:
    """``--apiserver-rollout``: what a deploy reads from Azure before it plans (components/stack_config.py):
    ``latest``, the scale set's latest rolling upgrade as ``az vmss rolling-upgrade get-latest`` prints it (null
    when it never had one), and ``latestModelApplied``, each instance's, as ``az vmss list-instances`` lists it."""
    accepted = "a JSON file holding latest (an object or null) and latestModelApplied (a list of true/false)"
    try:
        given = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ConfigError("--apiserver-rollout", str(path), f"{accepted} ({error})") from error
    latest = given.get("latest") if isinstance(given, dict) else None
    applied = given.get("latestModelApplied") if isinstance(given, dict) else None
    if not isinstance(latest, (dict, type(None))) or not (
        isinstance(applied, list) and all(isinstance(a, bool) for a in applied)
    ):
        raise ConfigError("--apiserver-rollout", str(path), accepted)
    return RollingUpgrade(latest, tuple(applied))


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
