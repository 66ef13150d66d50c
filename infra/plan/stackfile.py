"""Reads a stack's config the way the Pulumi CLI hands it to the program.

``Pulumi.yaml`` supplies typed defaults, ``Pulumi.<stack>.yaml`` the stack's values,
and ``--config KEY=VALUE`` overrides follow ``pulumi config set --path`` rules:
dotted paths into objects, ``[i]`` into lists, ``[-1]`` for the last item, and the
value read as a YAML scalar.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

from infra.cluster import ClusterSpec, build_cluster_spec
from infra.config import LOCATION_KEY
from infra.errors import NAMESPACE, ConfigError

PROJECT_DIR = Path(__file__).resolve().parents[2]


def load_stack_config(stack: str, overrides: list[str] | None = None,
                      project_dir: Path = PROJECT_DIR) -> dict[str, Any]:
    """``{"supercluster:network": {...}, "azure-native:location": "eastus", ...}``."""
    stack_file = project_dir / f"Pulumi.{stack}.yaml"
    if not stack_file.exists():
        stacks = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in project_dir.glob("Pulumi.*.yaml"))
        raise ConfigError("--stack", stack, "one of the stacks with a Pulumi.<stack>.yaml: " + ", ".join(stacks))
    values: dict[str, Any] = _project_defaults(project_dir / "Pulumi.yaml")
    values.update((yaml.safe_load(stack_file.read_text()) or {}).get("config") or {})
    for override in overrides or []:
        apply_override(values, override)
    return values


def namespace_values(values: dict[str, Any]) -> dict[str, Any]:
    """The program's own keys (``supercluster:*``) without the namespace: what ``parse_config`` reads."""
    prefix = f"{NAMESPACE}:"
    return {key[len(prefix):]: value for key, value in values.items() if key.startswith(prefix)}


def stack_cluster_spec(stack: str, overrides: list[str] | None = None) -> ClusterSpec:
    """Everything the program decides for ``stack`` before declaring a resource (``infra.cluster``)."""
    values = load_stack_config(stack, overrides)
    return build_cluster_spec(namespace_values(values), values.get(LOCATION_KEY))


def _project_defaults(project_file: Path) -> dict[str, Any]:
    project = yaml.safe_load(project_file.read_text())
    defaults = {}
    for key, declaration in (project.get("config") or {}).items():
        full_key = key if ":" in key else f"{project['name']}:{key}"
        if isinstance(declaration, dict) and "default" in declaration:
            defaults[full_key] = copy.deepcopy(declaration["default"])
        elif isinstance(declaration, dict) and "value" in declaration:
            defaults[full_key] = copy.deepcopy(declaration["value"])
    return defaults


_PATH_TOKEN = re.compile(r"([^.\[\]]+)|\[(-?\d+)\]")


def apply_override(values: dict[str, Any], override: str) -> None:
    """Applies one ``KEY=VALUE`` in place; KEY may omit the ``supercluster:`` namespace."""
    if "=" not in override:
        raise ConfigError("--config", override, "KEY=VALUE, e.g. nodePools[0].maxNodes=4")
    path, raw_value = override.split("=", 1)
    value = yaml.safe_load(raw_value) if raw_value != "" else ""
    match = re.fullmatch(r"(?:([A-Za-z0-9_-]+):)?(.+)", path)
    namespace, rest = (match.group(1) or NAMESPACE, match.group(2)) if match else (NAMESPACE, "")
    tokens = [(m.group(1), m.group(2)) for m in _PATH_TOKEN.finditer(rest)]
    rebuilt = ".".join(t[0] if t[0] is not None else f"[{t[1]}]" for t in tokens).replace(".[", "[")
    if not tokens or tokens[0][0] is None or rebuilt != rest:
        raise ConfigError("--config", override, "KEY=VALUE with KEY like network.natHosts.count or nodePools[0].maxNodes")
    top_key = f"{namespace}:{tokens[0][0]}"
    if len(tokens) == 1:
        values[top_key] = value
        return
    container = values.setdefault(top_key, {} if tokens[1][0] is not None else [])
    for (name, index), (next_name, _) in zip(tokens[1:-1], tokens[2:]):
        container = _step(container, name, index, {} if next_name is not None else [], override)
    name, index = tokens[-1]
    _assign(container, name, index, value, override)


def _step(container: Any, name: str | None, index: str | None, empty: Any, override: str) -> Any:
    if name is not None:
        if not isinstance(container, dict):
            raise ConfigError("--config", override, f"a path that matches the config (.{name} is not an object)")
        return container.setdefault(name, empty)
    if not isinstance(container, list):
        raise ConfigError("--config", override, f"a path that matches the config ([{index}] is not a list)")
    try:
        return container[int(index)]
    except IndexError:
        raise ConfigError("--config", override, f"an index within the list's {len(container)} items") from None


def _assign(container: Any, name: str | None, index: str | None, value: Any, override: str) -> None:
    if name is not None:
        if not isinstance(container, dict):
            raise ConfigError("--config", override, f"a path that matches the config (.{name} is not an object)")
        container[name] = value
        return
    if not isinstance(container, list):
        raise ConfigError("--config", override, f"a path that matches the config ([{index}] is not a list)")
    position = int(index)
    if position == len(container):
        container.append(value)  # like `pulumi config set --path list[N]` one past the end
        return
    try:
        container[position] = value
    except IndexError:
        raise ConfigError("--config", override, f"an index within the list's {len(container)} items") from None


def load_stack_outputs(files: list[Path]) -> dict[str, dict[str, Any]]:
    """``{"org/project/stack": {output: value}}`` merged from YAML/JSON files (``--stack-outputs``),
    what ``pulumi stack output --json --stack org/project/stack`` prints, keyed by the stack's name."""
    merged: dict[str, dict[str, Any]] = {}
    for path in files:
        accepted = "a readable YAML/JSON file mapping org/project/stack names to their outputs"
        try:
            loaded = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError):
            raise ConfigError("--stack-outputs", str(path), accepted) from None
        if not isinstance(loaded, dict) or not all(isinstance(v, dict) for v in loaded.values()):
            raise ConfigError("--stack-outputs", str(path), accepted)
        merged.update(loaded)
    return merged
