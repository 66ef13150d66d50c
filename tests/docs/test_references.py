"""What the prose names exists: every repo path, module, function and config key that README, docs/,
docstrings and comments name is in the tree, so a rename or a removal cannot leave a page or a comment
pointing at nothing.

Read without importing the project: paths are looked up on disk, dotted names
(``infra.node.pool.node_spec``) in the modules' source (top-level definitions, then a class's), calls and
snake-case names among the names the code defines and uses, and config keys
(``nodePools[].maxNodes``) among the keys the validator reads (``plan.config_docs.config_reads``).
"""

from __future__ import annotations

import ast
import builtins
import functools
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

from plan import config_docs
from tests.helpers import PROJECT_DIR

TOP_DIRS = ("infra", "components", "plan", "tests", "machine", "scripts", "docs", "benchmarks", "policypack")
PACKAGES = ("infra", "components", "plan", "tests", "machine", "benchmarks", "policypack")
PAGES = [PROJECT_DIR / "README.md", *sorted((PROJECT_DIR / "docs").rglob("*.md"))]
SOURCES = [
    PROJECT_DIR / "__main__.py",
    *(p for d in PACKAGES for p in sorted((PROJECT_DIR / d).rglob("*.py"))),
    *sorted((PROJECT_DIR / "scripts").glob("*.py")),
]

PATH = re.compile(r"(?<![\w./\-~$])(?:" + "|".join(TOP_DIRS) + r")/[\w.*\-/]*(?:::\w+)?")
DOTTED = re.compile(r"(?<![\w./\-])(?:" + "|".join(PACKAGES) + r"|__main__)(?:\.\w+)+")
CALL = re.compile(r"^([a-z_][a-z0-9_]*)\(")
CONFIG_KEY = re.compile(
    r"^[a-z][A-Za-z0-9]*(?:\[\d*\])?(?:\.[a-z][A-Za-z0-9]*(?:\[\d*\])?)+$|^[a-z]+[A-Z][A-Za-z0-9]*$"
)
EXTENSIONS = {"py", "md", "yaml", "yml", "json", "toml", "txt", "go", "sh", "pyi", "lock", "in", "cfg", "ini", "rst"}
# A file name's last part is not a config key (``etcd.yaml``, ``etcd.service``).
FILE_SUFFIXES = EXTENSIONS | {"service", "socket", "timer", "target", "conf", "mount"}
# A snake-case name (a function, a variable) or an upper-case constant (``ENVIRONMENT_FILE``).
IDENTIFIER = re.compile(r"^(?:[a-z][a-z0-9]*(?:_[a-z0-9]+)+|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)$")
# Names the prose uses that belong to other programs: Python's builtins, PromQL, the kernel, upstream
# metrics, import-linter, Linux capabilities, the Azure provider's environment. Any other called, snake-case or
# upper-case name the prose uses must be the code's.
OTHER_PROGRAMS = {
    *dir(builtins),
    "select",  # the system call
    "rate",
    "histogram_quantile",
    "absent",  # PromQL
    "pid_max",  # kernel.pid_max
    "set_mempolicy",  # a system call seccomp profiles name
    "ibv_reg_mr",  # libibverbs
    "type_properties_type",  # the Azure SDK's Python name of a resource's read-only type
    "acyclic_siblings",  # an import-linter contract type
    "prometheus_tsdb_head_series",
    "apiserver_flowcontrol_rejected_requests_total",
    "apiserver_storage_objects",  # upstream metrics
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "IPC_LOCK",  # Linux capabilities
    "ARM_USE_OIDC",  # an environment variable of Pulumi's azure-native provider (OIDC sign-in)
}
# Keys under which the user names the entries (a pool's name, a label): any child is a key.
OPEN_KEYS = ("addons.balloons.headroomNodes", "nodePools[].labels")
# Pages whose dotted camelCase names are another document's fields, not config keys.
NOT_CONFIG = {PROJECT_DIR / "docs" / "outputs-contract.md"}  # the stack's outputs (its network.vnetIds)


@functools.cache
def config_keys() -> frozenset[str]:
    """Every key the validator reads and every section above one (``addons.monitoring``)."""
    keys = set()
    for read in config_docs.config_reads():
        parts = read.path.split(".")
        keys |= {".".join(parts[: i + 1]) for i in range(len(parts))}
    return frozenset(keys | {key.removesuffix("[]") for key in keys})


@functools.cache
def top_level_keys() -> frozenset[str]:
    return frozenset(key.split(".")[0].removesuffix("[]") for key in config_keys())


@functools.cache
@functools.cache
def _tree(source: str) -> ast.Module:
    """A module's syntax tree, parsed once for the names, the definitions and the docstrings alike."""
    return ast.parse(source)


def definitions(path: Path) -> dict[str, set[str]]:
    """``{name: members}`` of a module's top-level definitions (a class's members; empty for others)."""
    found: dict[str, set[str]] = {}
    for node in _tree(path.read_text()).body:
        for name, body in _defined(node):
            found.setdefault(name, set()).update(n for child in body for n, _ in _defined(child))
    return found


def _defined(node: ast.AST) -> Iterator[tuple[str, list[ast.stmt]]]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        yield node.name, node.body if isinstance(node, ast.ClassDef) else []
    elif isinstance(node, ast.Assign):
        for target in node.targets:
            yield from ((n.id, []) for n in ast.walk(target) if isinstance(n, ast.Name))
    elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        yield node.target.id, []
    elif isinstance(node, ast.Import | ast.ImportFrom):
        yield from (((alias.asname or alias.name).split(".")[0], []) for alias in node.names)
    elif isinstance(node, ast.If | ast.Try):
        for child in [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])]:
            yield from _defined(child)


@functools.cache
def all_names() -> frozenset[str]:
    """Every name the project's code defines or uses, and every word of its string constants (metric and
    label names, flags, file names)."""
    names = set(OTHER_PROGRAMS) | {path.stem for path in SOURCES}
    for path in SOURCES:
        for node in ast.walk(_tree(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Name | ast.arg | ast.keyword | ast.Attribute):
                names.add(getattr(node, "id", None) or getattr(node, "arg", None) or getattr(node, "attr", ""))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and not _is_prose(node.value):
                names.update(re.findall(r"\w+", node.value))
    return frozenset(names)


def _is_prose(text: str) -> bool:
    """A message or description (spaces between words), whose words define nothing."""
    return " " in text.strip()


def path_problem(ref: str) -> str | None:
    path, _, test = ref.rstrip(".,:;").partition("::")
    path = path.rstrip(".,:;)")
    if "*" in path:
        return None if any(PROJECT_DIR.glob(path)) else "matches no file"
    target = PROJECT_DIR / path
    if not target.exists():
        return "no such file or directory"
    if test and target.suffix == ".py" and test not in definitions(target):
        return f"{path} has no {test}"
    return None


def module_problem(ref: str) -> str | None:
    parts = ref.split(".")
    if parts[-1] in EXTENSIONS:  # a file name (``plan.py``), not a module path
        return None
    if parts[0] == "__main__":
        module, rest = PROJECT_DIR / "__main__.py", parts[1:]
    else:
        module, rest = None, parts
        for i in range(len(parts), 0, -1):
            base = PROJECT_DIR.joinpath(*parts[:i])
            for candidate in (base.with_suffix(".py"), base / "__init__.py"):
                if candidate.exists():
                    module, rest = candidate, parts[i:]
                    break
            if module is not None:
                break
            if i == 1 and base.is_dir():
                return None  # a namespace directory (tests.e2e's Go modules and the like)
        if module is None:
            return "no such module"
    if not rest:
        return None
    names = definitions(module)
    if rest[0] not in names:
        return f"{module.relative_to(PROJECT_DIR)} defines no {rest[0]}"
    if len(rest) > 1 and names[rest[0]] and rest[1] not in names[rest[0]]:
        return f"{rest[0]} has no {rest[1]}"
    return None


def config_key_problem(ref: str) -> str | None:
    key = re.sub(r"\[\d*\]", "[]", ref)
    if key.split(".")[0].removesuffix("[]") not in top_level_keys() or key.split(".")[-1] in FILE_SUFFIXES:
        return None  # not a config key (an attribute path, a file name, a field of some other document)
    if key in config_keys() or key.replace("[]", "") in config_keys() or key.startswith(OPEN_KEYS):
        return None
    return "no such config key"


def problems_in(text: str, spans: list[str], *, config: bool = True) -> Iterator[tuple[str, str]]:
    """``(reference, problem)`` for the references in ``text`` (any prose) and ``spans`` (its code spans)."""
    for match in PATH.finditer(text):
        if problem := path_problem(match.group(0)):
            yield match.group(0), problem
    for match in DOTTED.finditer(text):
        if problem := module_problem(match.group(0)):
            yield match.group(0), problem
    for span in spans:
        span = span.strip()
        if (call := CALL.match(span)) and call.group(1) not in all_names():
            yield span, "no function of that name"
        elif IDENTIFIER.match(span) and span not in all_names():
            yield span, "no such name in the code"
        key = span.split("=")[0]
        if config and CONFIG_KEY.match(key) and (problem := config_key_problem(key)):
            yield key, problem


def _markdown_spans(text: str) -> tuple[str, list[str]]:
    prose = re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)
    return prose, re.findall(r"`([^`\n]+)`", prose)


def _python_prose(source: str) -> str:
    """A module's docstrings and comments, one per line."""
    tree = _tree(source)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                found.append(doc)
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    found += [token.string for token in tokens if token.type == tokenize.COMMENT]
    return "\n".join(found)


def references(path: Path) -> list[str]:
    text = path.read_text()
    if path.suffix == ".md":
        prose, spans = _markdown_spans(text)
    else:
        prose = _python_prose(text)
        spans = re.findall(r"``([^`\n]+)``|(?<!`)`([^`\n]+)`(?!`)", prose)
        spans = [a or b for a, b in spans]
    return [f"{ref}: {problem}" for ref, problem in problems_in(prose, spans, config=path not in NOT_CONFIG)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(PROJECT_DIR)))
def test_every_reference_in_the_docs_exists(page):
    assert references(page) == []


# The programs under machine/ ship byte for byte in cloud-init or a ConfigMap: editing one comment changes
# every machine's user data and rolls the fleet. A path they name that moved (the infra/ layout) waits for
# their next real change; each entry must still be found, so a fixed one cannot linger here.
SHIPPED_UNTIL_NEXT_CHANGE = {
    "machine/addons/iptables_exporter.py: infra/traffic_accounting.py: no such file or directory",
    "machine/etcd/member.py: infra/etcd/machine.py: no such file or directory",
    "machine/shared/imds_token.py: infra/secrets.py: no such file or directory",
    "machine/shared/local_disk.py: infra/local_disk.py: no such file or directory",
}


def test_every_reference_in_docstrings_and_comments_exists():
    found = [f"{path.relative_to(PROJECT_DIR)}: {ref}" for path in SOURCES for ref in references(path)]
    assert [ref for ref in found if ref not in SHIPPED_UNTIL_NEXT_CHANGE] == []
    assert set(found) >= SHIPPED_UNTIL_NEXT_CHANGE


def test_the_reference_check_catches_a_seeded_drift(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "See `infra/node/gone.py`, `infra.node.pool.no_such_function`, `declare_addons(spec)`, `node_boot_steps`,\n"
        "`NO_SUCH_CONSTANT` and `images.machineImageVersion`;\n"
        "`infra/node/pool.py`, `infra.node.pool.node_spec`, `node_spec()`,\n"
        "`nodePools[0].maxNodes` and `etcd.yaml` exist.\n"
        "```\nscripts/in_a_code_block_is_not_checked.py\n```\n"
    )
    assert references(page) == [
        "infra/node/gone.py: no such file or directory",
        "infra.node.pool.no_such_function: infra/node/pool.py defines no no_such_function",
        "declare_addons(spec): no function of that name",
        "node_boot_steps: no such name in the code",
        "NO_SUCH_CONSTANT: no such name in the code",
        "images.machineImageVersion: no such config key",
    ]
    source = tmp_path / "module.py"
    source.write_text(
        '"""Rendered by ``infra.assembly.desired_cluster.render_everything``."""\n\nX = 1  # see scripts/...py\n'
    )
    assert references(source) == [
        "scripts/...py: no such file or directory",
        "infra.assembly.desired_cluster.render_everything: "
        "infra/assembly/desired_cluster.py defines no render_everything",
    ]
