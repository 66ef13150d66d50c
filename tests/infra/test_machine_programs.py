"""The programs under machine/ run on machines that have only Python's standard library (and bash)."""

from __future__ import annotations

import ast
import sys

import pytest

import machine

PROGRAMS = sorted(
    p
    for p in machine.PROGRAMS_DIR.rglob("*")
    if p.is_file() and p.suffix in (".py", ".sh") and p.name != "__init__.py" and "__pycache__" not in p.parts
)
# PyYAML ships with every Ubuntu cloud image: cloud-init itself depends on it.
ALSO_ON_THE_MACHINE = {"etcd/member.py": {"yaml"}}


def imported_modules(source: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize(
    "program", [p for p in PROGRAMS if p.suffix == ".py"], ids=lambda p: str(p.relative_to(machine.PROGRAMS_DIR))
)
def test_every_program_needs_only_the_standard_library(program):
    name = str(program.relative_to(machine.PROGRAMS_DIR))
    allowed = set(sys.stdlib_module_names) | ALSO_ON_THE_MACHINE.get(name, set()) | {"__future__"}
    assert imported_modules(program.read_text()) <= allowed, name


def test_one_program_formats_local_disks():
    formatting = [str(p.relative_to(machine.PROGRAMS_DIR)) for p in PROGRAMS if "mkfs" in p.read_text()]
    assert formatting == ["shared/local_disk.py"]
