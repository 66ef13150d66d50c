"""The layers hold: import-linter's contracts in pyproject.toml, checked on every test run.

``infra/`` never imports ``components/``, ``plan/`` or Pulumi, ``components/`` never imports
``plan/``, no two modules of ``infra/`` import each other, directly or through others, and
``infra/``'s packages by concern import only from the packages below them. No two modules of ``infra/``
share a file name, so a name says which one is meant.
"""

from __future__ import annotations

import ast
import collections
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


# The entry points that render a machine's cloud-init (infra.assembly.desired_cluster calls them).
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
    """Every machine's cloud-init is rendered before any resource is declared (infra.assembly.desired_cluster);
    components
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


def same_named(root: Path) -> dict[str, list[str]]:
    """``{file name: paths}`` for every file name two or more modules under ``root`` share."""
    by_name = collections.defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        if path.name != "__init__.py":
            by_name[path.name].append(str(path.relative_to(root)))
    return {name: paths for name, paths in by_name.items() if len(paths) > 1}


def test_no_two_modules_of_infra_share_a_name(tmp_path):
    assert same_named(PROJECT_DIR / "infra") == {}
    # The check catches a seeded clash.
    for package in ("node", "addons"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "images.py").touch()
    assert same_named(tmp_path) == {"images.py": ["addons/images.py", "node/images.py"]}
