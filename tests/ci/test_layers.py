"""The layers hold: import-linter's contracts in pyproject.toml, checked on every test run.

``infra/`` never imports ``components/``, ``plan/`` or Pulumi, ``components/`` never imports
``plan/``, and no two modules of ``infra/`` import each other, directly or through others.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from plan.stackfile import PROJECT_DIR


def test_import_contracts_are_kept():
    lint_imports = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(lint_imports), "--no-cache"], cwd=PROJECT_DIR, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    contracts = tomllib.loads((PROJECT_DIR / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert f"Contracts: {len(contracts)} kept, 0 broken." in result.stdout
