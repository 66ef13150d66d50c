"""Reads a stack's config the way the Pulumi CLI hands it to the program.

``Pulumi.yaml`` supplies typed defaults, ``Pulumi.<stack>.yaml`` the stack's values (both read as
YAML 1.2 with duplicate keys refused, ``infra.plan.stack_yaml``), and ``--config KEY=VALUE``
overrides follow ``pulumi config set --path`` in full (pulumi.com/docs/iac/cli/commands/pulumi_config_set):

- the path: ``name``, ``.name``, ``["any.key"]`` into objects, ``[N]`` into lists; a missing object
  or list on the way is created; an index equal to the list's length appends, a larger one (or a
  negative one) is refused;
- the value: "true" and "false" are booleans, integers are numbers (but a value of two or more
  characters starting with "0" stays a string, so "0123" keeps its zero), anything else a string;
  a top-level key (no path) is always a string.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

from infra.config import check_config_keys
from infra.errors import NAMESPACE, ConfigError
from infra.plan.stack_yaml import load_file

PROJECT_DIR = Path(__file__).resolve().parents[2]
# Go's strconv.Atoi on a 64-bit machine: an optional sign, decimal digits, within int64.
ATOI = re.compile(r"[+-]?[0-9]+")
INT64 = 2**63


def load_stack_config(stack: str, overrides: list[str] | None = None,
                      project_dir: Path = PROJECT_DIR, config_file: Path | None = None) -> dict[str, Any]:
    """``{"supercluster:network": {...}, "azure-native:location": "eastus", ...}``; ``config_file``
    replaces ``Pulumi.<stack>.yaml`` (the Pulumi CLI's ``--config-file``)."""
    stack_file = config_file or project_dir / f"Pulumi.{stack}.yaml"
    if config_file is not None and not config_file.is_file():
        raise ConfigError("--config-file", str(config_file), "a readable stack config file")
    if not stack_file.exists():
        stacks = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in project_dir.glob("Pulumi.*.yaml"))
        raise ConfigError("--stack", stack, "one of the stacks with a Pulumi.<stack>.yaml: " + ", ".join(stacks))
    values: dict[str, Any] = _project_defaults(project_dir / "Pulumi.yaml")
    values.update(_stack_values(stack_file))
    for override in overrides or []:
        apply_override(values, override)
    check_config_keys(values)
    return values


def _stack_values(stack_file: Path) -> dict[str, Any]:
    document = load_file(stack_file)
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise ConfigError(f"{stack_file.name}:1:1", document, "a mapping with a config: section at the top level")
    config = document.get("config")
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise ConfigError(f"{stack_file.name} config", config, "a mapping of namespace:key to values")
    for key in config:
        if ":" not in key:
            raise ConfigError(f"{stack_file.name} config.{key}", config[key],
                              f"a key of the form <namespace>:<name>, e.g. {NAMESPACE}:{key} (as Pulumi requires)")
    return config


def _project_defaults(project_file: Path) -> dict[str, Any]:
    project = load_file(project_file)
    defaults = {}
    for key, declaration in (project.get("config") or {}).items():
        full_key = key if ":" in key else f"{project['name']}:{key}"
        if isinstance(declaration, dict) and "default" in declaration:
            defaults[full_key] = copy.deepcopy(declaration["default"])
        elif isinstance(declaration, dict) and "value" in declaration:
            defaults[full_key] = copy.deepcopy(declaration["value"])
    return defaults


def parse_path(override: str, path: str) -> list[str | int]:
    """``nodePools[3].labels["team.io/x"]`` -> ``["nodePools", 3, "labels", "team.io/x"]``."""
    segments: list[str | int] = []
    position = 0
    accepted = ('KEY=VALUE with KEY a path like network.natHosts.count, nodePools[0].maxNodes or '
                'nodePools[0].labels["team.io/name"]')
    while position < len(path):
        if path[position] == "[":
            end = path.find("]", position)
            if path.startswith('["', position):
                end = path.find('"]', position + 2)
                if end < 0:
                    raise ConfigError("--config", override, accepted)
                segments.append(path[position + 2:end])
                position = end + 2
            elif end > position + 1 and path[position + 1:end].isdigit():
                segments.append(int(path[position + 1:end]))
                position = end + 1
            else:
                raise ConfigError("--config", override, "a list index of 0 or more in [ ] (as pulumi config set --path)")
            if position < len(path) and path[position] not in ".[":
                raise ConfigError("--config", override, accepted)
            if position < len(path) and path[position] == ".":
                position += 1
                if position == len(path):
                    raise ConfigError("--config", override, accepted)
            continue
        end = len(path)
        for stop in ".[":
            found = path.find(stop, position)
            if found >= 0:
                end = min(end, found)
        name = path[position:end]
        if not name:
            raise ConfigError("--config", override, accepted)
        segments.append(name)
        position = end
        if position < len(path) and path[position] == ".":
            position += 1
            if position == len(path):
                raise ConfigError("--config", override, accepted)
    if not segments or not isinstance(segments[0], str):
        raise ConfigError("--config", override, accepted)
    return segments


def path_value(text: str) -> Any:
    """A ``--path`` value as ``pulumi config set --path`` stores it."""
    if text in ("true", "false"):
        return text == "true"
    if len(text) > 1 and text[0] == "0":
        return text
    if ATOI.fullmatch(text) and -INT64 <= int(text) < INT64:
        return int(text)
    return text


def apply_override(values: dict[str, Any], override: str) -> None:
    """Applies one ``KEY=VALUE`` in place; KEY may omit the ``supercluster:`` namespace."""
    if "=" not in override:
        raise ConfigError("--config", override, "KEY=VALUE, e.g. nodePools[0].maxNodes=4")
    key, text = override.split("=", 1)
    match = re.fullmatch(r"([A-Za-z0-9_-]+):(.*)", key)
    namespace, path = (match.group(1), match.group(2)) if match else (NAMESPACE, key)
    segments = parse_path(override, path)
    top_key = f"{namespace}:{segments[0]}"
    if len(segments) == 1:
        values[top_key] = text  # a top-level entry is always a string
        return
    parent: Any = values
    slot: str | int = top_key
    for segment in segments[1:]:
        container = _child(parent, slot, segment, override)
        parent, slot = container, segment
    _put(parent, slot, path_value(text), override)


def _child(parent: Any, slot: str | int, next_segment: str | int, override: str) -> Any:
    """The object or list at ``parent[slot]``, created when missing (the kind the next segment needs)."""
    empty: Any = [] if isinstance(next_segment, int) else {}
    current = parent.get(slot) if isinstance(parent, dict) else (parent[slot] if slot < len(parent) else None)
    if current is None:
        _put(parent, slot, empty, override)
        return empty
    wanted = list if isinstance(next_segment, int) else dict
    if not isinstance(current, wanted):
        kind = "a list" if wanted is list else "an object"
        raise ConfigError("--config", override, f"a path that matches the config ({slot} is not {kind})")
    return current


def _put(container: Any, slot: str | int, value: Any, override: str) -> None:
    if isinstance(container, dict):
        container[slot] = value
        return
    assert isinstance(slot, int)
    if slot == len(container):
        container.append(value)  # like `pulumi config set --path list[N]` one past the end
    elif slot < len(container):
        container[slot] = value
    else:
        raise ConfigError("--config", override,
                          f"an index from 0 to {len(container)} (the list has {len(container)} items; "
                          f"{len(container)} appends)")


def load_stack_outputs(files: list[Path]) -> dict[str, dict[str, Any]]:
    """``{"org/project/stack": {output: value}}`` merged from YAML/JSON files (``--stack-outputs``),
    what ``pulumi stack output --json --stack org/project/stack`` prints, keyed by the stack's name."""
    merged: dict[str, dict[str, Any]] = {}
    for path in files:
        accepted = "a readable YAML/JSON file mapping org/project/stack names to their outputs"
        try:
            loaded = load_file(Path(path))
        except OSError:
            raise ConfigError("--stack-outputs", str(path), accepted) from None
        if not isinstance(loaded, dict) or not all(isinstance(v, dict) for v in loaded.values()):
            raise ConfigError("--stack-outputs", str(path), accepted)
        merged.update(loaded)
    return merged
