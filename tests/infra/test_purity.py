"""infra/ is the functional core: it never imports Pulumi (only the offline plan's runner does)."""

from __future__ import annotations

import ast
from pathlib import Path

INFRA = Path(__file__).resolve().parents[2] / "infra"


def test_infra_never_imports_pulumi():
    offenders = []
    for path in INFRA.rglob("*.py"):
        if path.is_relative_to(INFRA / "plan"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0].startswith("pulumi")]
    assert offenders == []
