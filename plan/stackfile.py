"""Reads a stack's config the way the Pulumi CLI hands it to the program.

``Pulumi.yaml`` supplies typed defaults, ``Pulumi.<stack>.yaml`` the stack's values (both read as
YAML 1.2 with duplicate keys refused, ``plan.stack_yaml``), and ``--config KEY=VALUE``
overrides follow ``pulumi config set --path`` in full (pulumi.com/docs/iac/cli/commands/pulumi_config_set):

- the path: ``name``, ``.name``, ``["any.key"]`` into objects, ``[N]`` into lists; a missing object
  is created, a missing list as long as its index needs (``names[2]`` -> ``[null, null, x]``); in an
  existing list an index equal to its length appends, a larger (or negative) one is refused;
- the value: "true" and "false" are booleans, integers are numbers (but a value of two or more
  characters starting with "0" stays a string, so "0123" keeps its zero), anything else a string;
  a top-level key (no path) is always a string.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

from infra.cluster.cluster_spec import ClusterSpec, build_cluster_spec
from infra.config.cluster_config import LOCATION_KEY, check_config_keys, decode_cli_value
from infra.config.errors import NAMESPACE, ConfigError
from plan.stack_yaml import load_file

PROJECT_DIR = Path(__file__).resolve().parents[1]
# Go's strconv.ParseInt/ParseUint in base 10: an optional sign, decimal digits, within int64 (or uint64).
GO_DECIMAL = re.compile(r"[+-]?[0-9]+")
INT64 = 2**63
# A new list is created as long as its index needs (Pulumi's newContainer); bounded so a typo cannot
# allocate millions of items.
MAX_NEW_LIST = 10_000


def load_stack_config(
    stack: str, overrides: list[str] | None = None, project_dir: Path = PROJECT_DIR, config_file: Path | None = None
) -> dict[str, Any]:
    """``{"supercluster:network": {...}, "azure-native:location": "eastus", ...}``; ``config_file``
    replaces ``Pulumi.<stack>.yaml`` (the Pulumi CLI's ``--config-file``)."""
    stack_file = config_file or project_dir / f"Pulumi.{stack}.yaml"
    if config_file is not None and not config_file.is_file():
        raise ConfigError("--config-file", str(config_file), "a readable stack config file")
    if not stack_file.exists():
        stacks = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in project_dir.glob("Pulumi.*.yaml"))
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
            raise ConfigError(
                f"{stack_file.name} config.{key}",
                config[key],
                f"a key of the form <namespace>:<name>, e.g. {NAMESPACE}:{key} (as Pulumi requires)",
            )
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
    """``nodePools[3].labels["team.io/x"]`` -> ``["nodePools", 3, "labels", "team.io/x"]``, by the grammar
    of Pulumi's strict property paths (sdk go/common/resource properties_path.go): names end at '.' or
    '['; ``["..."]`` is a key (``\\"`` a quote in it); ``[N]`` a signed decimal index; ``[*]`` the key "*";
    a path may not start or end with '.', nor have '.' before '['."""

    def refuse(why: str) -> ConfigError:
        return ConfigError(
            "--config",
            override,
            f'a key path like nodePools[0].maxNodes or nodePools[0].labels["team.io/name"] ({why})',
        )

    if path.startswith("."):
        raise refuse("it may not start with '.'")
    segments: list[str | int] = []
    rest = path
    while rest:
        if rest[0] == ".":
            rest = rest[1:]
            if not rest:
                raise refuse("it may not end with '.'")
            if rest[0] == "[":
                raise refuse("a name must follow '.'")
        elif rest.startswith('["'):
            key, i = [], 2
            while True:
                if i >= len(rest):
                    raise refuse("a quoted key lacks its closing quote")
                if rest[i] == '"':
                    i += 1
                    break
                if rest.startswith('\\"', i):
                    key.append('"')
                    i += 2
                else:
                    key.append(rest[i])
                    i += 1
            if not rest.startswith("]", i):
                raise refuse("a quoted key lacks its closing bracket")
            segments.append("".join(key))
            rest = rest[i + 1 :]
        elif rest[0] == "[":
            end = rest.find("]")
            if end < 0:
                raise refuse("an index lacks its closing bracket")
            index = rest[1:end]
            if index == "*":
                segments.append("*")
            elif GO_DECIMAL.fullmatch(index) and -INT64 <= int(index) < INT64:
                segments.append(int(index))
            else:
                raise refuse(f"[{index}] is not a list index")
            rest = rest[end + 1 :]
        else:
            end = min([i for i in (rest.find("."), rest.find("[")) if i >= 0], default=len(rest))
            segments.append(rest[:end])
            rest = rest[end:]
    if not segments or not isinstance(segments[0], str) or not segments[0]:
        raise refuse("it must start with a key name")
    return segments


def path_value(text: str) -> Any:
    """A ``--path`` value as ``pulumi config set --path`` stores it (config object.go ``coerce``): "true"
    and "false" are booleans; a value of two or more characters starting with "0" stays a string; a
    decimal that fits int64 or uint64 is a number; anything else is a string."""
    if text in ("true", "false"):
        return text == "true"
    if len(text) > 1 and text[0] == "0":
        return text
    if GO_DECIMAL.fullmatch(text) and -INT64 <= int(text) < 2 * INT64 and not (text[0] == "+" and int(text) >= INT64):
        return int(text)
    return text


def apply_override(values: dict[str, Any], override: str) -> None:
    """Applies one ``KEY=VALUE`` in place, as ``pulumi config set --path KEY VALUE``; KEY may omit the
    ``supercluster:`` namespace."""
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
    values[top_key] = _set(values.get(top_key), segments[1:], path_value(text), [segments[0]], override)


def _container(accessor: str | int) -> Any:
    """What a missing value on the path becomes: a list long enough for the index, or an object."""
    if isinstance(accessor, int):
        if accessor > MAX_NEW_LIST:
            raise ConfigError("--config", str(accessor), f"an index of at most {MAX_NEW_LIST} for a new list")
        return [None] * (accessor + 1) if accessor >= 0 else []
    return {}


def _set(current: Any, path: list[str | int], new: Any, prefix: list[str | int], override: str) -> Any:
    """``current`` with ``new`` at ``path``. At the top level a value of another kind is replaced by the
    container the path needs (Pulumi's compatibility rule); deeper, it is refused."""
    if not path:
        return new
    head = path[0]
    if current is None or (not isinstance(current, (list, dict)) and len(prefix) == 1):
        current = _container(head)
    where = _path_text(prefix)
    if isinstance(current, list):
        if not isinstance(head, int):
            raise ConfigError("--config", override, f"a path that matches the config ({where} is a list)")
        if not 0 <= head <= len(current):
            raise ConfigError(
                "--config",
                override,
                f"an index from 0 to {len(current)} in {where} (it has {len(current)} items; {len(current)} appends)",
            )
        if head == len(current):
            current.append(None)  # an index equal to the length appends
        current[head] = _set(current[head], path[1:], new, prefix + [head], override)
    elif isinstance(current, dict):
        if not isinstance(head, str):
            raise ConfigError("--config", override, f"a path that matches the config ({where} is an object)")
        current[head] = _set(current.get(head), path[1:], new, prefix + [head], override)
    else:
        kind = "a list" if isinstance(head, int) else "an object"
        raise ConfigError("--config", override, f"a path that matches the config ({where} is not {kind})")
    return current


def _path_text(prefix: list[str | int]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else p) for i, p in enumerate(prefix))


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


def namespace_values(values: dict[str, Any]) -> dict[str, Any]:
    """The program's own keys (``supercluster:*``) without the namespace, decoded as the program
    receives them (``decode_cli_value``): what ``parse_config`` reads."""
    prefix = f"{NAMESPACE}:"
    return {key[len(prefix) :]: decode_cli_value(value) for key, value in values.items() if key.startswith(prefix)}


def stack_cluster_spec(stack: str, overrides: list[str] | None = None) -> ClusterSpec:
    """The validated inputs the program decides for ``stack`` (``infra.cluster.cluster_spec``; the machines and add-on
    objects are assembled from them by ``infra.assembly.desired_cluster``)."""
    values = load_stack_config(stack, overrides)
    return build_cluster_spec(namespace_values(values), values.get(LOCATION_KEY))
