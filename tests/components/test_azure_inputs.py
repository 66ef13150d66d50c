"""Typed declare: typings/azure_inputs.pyi gives every ``declare.azure`` type token the SDK's own input
type, so mypy (run on the tree by tests/ci/test_lint.py) and an editor catch a misspelt property.

The file is generated from the installed pulumi-azure-native by scripts/generate_azure_inputs.py; it must
be what the script writes today (the SDK pinned in requirements.in, the tokens the program declares)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from plan.stackfile import PROJECT_DIR

# The second stage of scripts/test.sh (tens of seconds): mypy run on sample programs.
pytestmark = pytest.mark.slow

GOOD = """
from components import declare

declare.azure("network:VirtualNetwork", "vnet", {
    "virtualNetworkName": "vnet", "resourceGroupName": "rg", "location": "eastus",
    "addressSpace": {"addressPrefixes": ["10.0.0.0/16"]}, "flowTimeoutInMinutes": 4,
})
"""


def _mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    program = tmp_path / "program.py"
    program.write_text(source)
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "mypy"),
            "--config-file",
            str(PROJECT_DIR / "pyproject.toml"),
            "--follow-imports=silent",
            "--cache-dir",
            str(tmp_path / "cache"),
            str(program),
        ],
        cwd=PROJECT_DIR,
        env={**os.environ, "MYPYPATH": str(PROJECT_DIR)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_generated_types_are_up_to_date():
    result = subprocess.run(
        [sys.executable, "scripts/generate_azure_inputs.py", "--check"],
        cwd=PROJECT_DIR,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_correct_declaration_passes_mypy(tmp_path):
    result = _mypy(tmp_path, GOOD)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "change",
    [
        ('"addressSpace"', '"adressSpace"'),  # a misspelt property
        ('"flowTimeoutInMinutes": 4', '"flowTimeoutInMinutes": "four"'),  # a value of the wrong type
        ('"network:VirtualNetwork"', '"network:VirtualNetwrk"'),  # a type token the SDK does not have
    ],
)
def test_a_mistake_fails_mypy(tmp_path, change):
    """mypy names the call (the overloads' note lists the input type each token takes)."""
    result = _mypy(tmp_path, GOOD.replace(*change))
    assert result.returncode == 1, result.stdout + result.stderr
    assert 'program.py:4: error: No overload variant of "azure" matches' in result.stdout, result.stdout
