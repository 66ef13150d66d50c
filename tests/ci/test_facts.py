"""Facts have one home: ``infra/facts``. Their literals appear nowhere else in the program's code, and
the package imports nothing else from the project, so every layer can import it.

A copy kept in sync by hand is how the apiserver port came to be spelled in five places and the local-SSD
mount in two; this guard refuses the next copy. Docstrings and comments may name a value; code may not.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from infra.facts import host_paths, ports, roles
from plan.stackfile import PROJECT_DIR

FACTS = PROJECT_DIR / "infra" / "facts"
PORTS = (
    ports.APISERVER,
    ports.ETCD_CLIENT,
    ports.ETCD_PEER,
    ports.ETCD_METRICS,
    ports.SCHEDULER,
    ports.CONTROLLER_MANAGER,
)
PATHS = (host_paths.KUBELET_ROOT, host_paths.LOCAL_SSD_MOUNT)
_PORT_IN_TEXT = re.compile(r"(?<![\d.])(" + "|".join(map(str, PORTS)) + r")(?![\d.])")
_PATH_IN_TEXT = re.compile("(" + "|".join(map(re.escape, PATHS)) + r")(?![\w-])")
# The names a role goes by: __main__.py wires roles, subnets and identities through infra.facts.roles only.
ROLE_NAMES = {name for role in roles.DEDICATED for name in (role.subnet, role.identity, role.machine)} | {
    roles.NODE_IDENTITY,
    roles.AUTOSCALER_IDENTITY,
    roles.SYSTEM_VNET,
    roles.ENDPOINTS_SUBNET,
    *roles.POOL_ROLES,
}
# infra/contract.py is vendored by consuming teams on its own (standard library only): its field
# descriptions may spell the endpoint's port.
EXEMPT = {PROJECT_DIR / "infra" / "contract.py"}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def fact_literals(source: str) -> Iterator[tuple[int, str]]:
    """``(line, literal)`` for each port or host path spelled in code (not in a docstring or comment)."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or id(node) in docstrings or isinstance(node.value, bool):
            continue
        if isinstance(node.value, int) and node.value in PORTS:
            yield node.lineno, repr(node.value)
        elif isinstance(node.value, str):
            for match in (*_PORT_IN_TEXT.finditer(node.value), *_PATH_IN_TEXT.finditer(node.value)):
                yield node.lineno, match.group(0)


def role_literals(source: str) -> Iterator[tuple[int, str]]:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in ROLE_NAMES:
            yield node.lineno, node.value


def _program_files() -> list[Path]:
    files = [PROJECT_DIR / "__main__.py"]
    for package in ("infra", "components", "plan", "policypack"):
        files += sorted((PROJECT_DIR / package).rglob("*.py"))
    return [f for f in files if not f.is_relative_to(FACTS) and f not in EXEMPT]


def test_no_port_or_host_path_is_spelled_outside_the_facts():
    found = [
        f"{path.relative_to(PROJECT_DIR)}:{line} {literal}"
        for path in _program_files()
        for line, literal in fact_literals(path.read_text())
    ]
    assert not found, "import it from infra.facts instead: " + ", ".join(found)


def test_main_names_no_role_subnet_or_identity():
    found = list(role_literals((PROJECT_DIR / "__main__.py").read_text()))
    assert not found, f"__main__.py spells role names (infra.facts.roles has them): {found}"


def test_the_guards_catch_a_seeded_copy():
    seeded = '''"""A docstring may say 6443 and /var/lib/kubelet."""
PORT = 6443  # a comment may say 2379
URL = f"https://{ip}:2379"
PROBE = "10.0.0.4:10259"
ROOT = "/var/lib/kubelet/pki"
DATA = f"{x}/var/lib/local-ssd"
NOT_A_PORT = 16443
NOT_THE_MOUNT = "/var/lib/local-ssd-old"
'''
    assert [literal for _, literal in sorted(fact_literals(seeded))] == [
        "6443",
        "2379",
        "10259",
        "/var/lib/kubelet",
        "/var/lib/local-ssd",
    ]
    assert [value for _, value in role_literals('subnet_ids["nat"], ids[roles.NODE_IDENTITY], "natural"')] == ["nat"]


def test_the_facts_import_nothing_else_from_the_project():
    found = []
    for path in sorted(FACTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            found += [
                f"{path.name}: {name}"
                for name in names
                if name.split(".")[0] not in sys.stdlib_module_names and not name.startswith("infra.facts")
            ]
    assert not found
