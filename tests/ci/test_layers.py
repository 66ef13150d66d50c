"""The layers hold: import-linter's contracts in pyproject.toml, checked on every test run.

``infra/`` never imports ``components/``, ``plan/`` or Pulumi, ``components/`` never imports
``plan/``, and no two modules of ``infra/`` import each other, directly or through others.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

from plan.stackfile import PROJECT_DIR


def test_import_contracts_are_kept():
    lint_imports = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run(
        [str(lint_imports), "--no-cache"], cwd=PROJECT_DIR, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    contracts = tomllib.loads((PROJECT_DIR / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert f"Contracts: {len(contracts)} kept, 0 broken." in result.stdout


# The entry points that render a machine's cloud-init (infra.assembly calls them).
RENDERERS = {
    "render",
    "node_cloud_config",
    "nat_host_cloud_config",
    "member_cloud_config",
    "member_cloud_init",
    "apiserver_machines",
    "apiserver_cloud_config",
}


def test_no_component_renders_a_machine():
    """Every machine's cloud-init is rendered before any resource is declared (infra.assembly); components
    only declare it."""
    found = []
    for path in sorted((PROJECT_DIR / "components").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.ImportFrom)
                else [node.attr]
                if isinstance(node, ast.Attribute)
                else []
            )
            found += [f"{path.name}:{node.lineno} {name}" for name in names if name in RENDERERS]
    assert not found
