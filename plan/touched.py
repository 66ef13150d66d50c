"""Which stacks a change can affect: ``git diff --name-only BASE HEAD | python3 -m plan.touched``.

Prints a JSON list of stack names for a workflow matrix. ``Pulumi.<stack>.yaml`` touches
its own stack; the program (``__main__.py``, ``Pulumi.yaml``, ``requirements.in`` and ``.lock``,
``infra/``, ``components/`` and anything unknown) touches every stack; tests, docs, CI
scripts and benchmarks touch none. Standard library only, so CI runs it before installing anything.

``--pull-request`` keeps only the stacks code from a pull request may preview against real state
(``PULL_REQUEST_STACKS``): prod is not one. A real preview decrypts the stack's secrets and reaches
its apiserver, so code nobody has reviewed yet never gets prod's; prod's reviewers read the offline
plan diff, and prod is previewed from ``main`` only, by the deploy workflow (docs/workflows.md).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[1]
# Paths that cannot change what any stack declares or renders.
NOT_THE_PROGRAM = re.compile(
    r"(tests|\.github|\.ci|scripts|benchmarks|docs)/.*|[^/]*\.md|\.gitignore|pytest\.ini|pyproject\.toml|LICENSE"
)
# The stacks whose state key and apiserver the preview identity and runners may reach (docs/workflows.md).
PULL_REQUEST_STACKS = ("dev",)
STACK_FILE = re.compile(r"Pulumi\.([A-Za-z0-9_.-]+)\.yaml")


def stacks_in(project_dir: Path = PROJECT_DIR) -> list[str]:
    return sorted(STACK_FILE.fullmatch(p.name).group(1) for p in project_dir.glob("Pulumi.*.yaml"))


def touched_stacks(changed: Iterable[str], stacks: list[str], *, pull_request: bool = False) -> list[str]:
    if pull_request:
        stacks = [stack for stack in stacks if stack in PULL_REQUEST_STACKS]
    touched: set[str] = set()
    for path in (p.strip() for p in changed):
        if not path or NOT_THE_PROGRAM.fullmatch(path):
            continue
        stack_file = STACK_FILE.fullmatch(path)
        if stack_file:
            touched.add(stack_file.group(1))
        else:
            return list(stacks)
    return [stack for stack in stacks if stack in touched]  # a deleted stack file has nothing to preview


if __name__ == "__main__":
    print(json.dumps(touched_stacks(sys.stdin, stacks_in(), pull_request="--pull-request" in sys.argv[1:])))
