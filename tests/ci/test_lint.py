"""Lint, format and types: ``ruff check`` and ``ruff format --check`` over the tree in the fast suite, and
``mypy`` (strict on ``infra/``, less so on ``components/``) in the slow stage, all configured in
pyproject.toml. A finding fails the suite (and so scripts/test.sh and .ci/run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from plan.stackfile import PROJECT_DIR

BIN = Path(sys.executable).parent


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], cwd=PROJECT_DIR, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing():
    result = _run("ruff", "check", "--no-cache", "--output-format", "concise", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_changes_nothing():
    result = _run("ruff", "format", "--check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow  # a cold, whole-program type check: about 15 s of one core
def test_mypy_finds_nothing():
    result = _run("mypy", "--no-incremental", "--cache-dir", "/dev/null")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout
