"""A small TOML writer for the config files supercluster renders (containerd's config.toml).

Python ships a TOML reader (``tomllib``) but no writer. This one covers what the
renderers produce: nested tables of strings, integers, booleans and lists of them.
Output is deterministic (insertion order) and always reads back with ``tomllib``
to the same dict (tests/infra/test_toml.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def dumps(document: Mapping[str, Any]) -> str:
    lines: list[str] = []
    _table(document, (), lines)
    return "\n".join(lines).lstrip("\n") + "\n"


def _table(table: Mapping[str, Any], path: tuple[str, ...], lines: list[str]) -> None:
    scalars = {k: v for k, v in table.items() if not isinstance(v, Mapping)}
    tables = {k: v for k, v in table.items() if isinstance(v, Mapping)}
    if path and (scalars or not tables):
        lines += ["", "[" + ".".join(_key(part) for part in path) + "]"]
    lines += [f"{_key(key)} = {_value(value)}" for key, value in scalars.items()]
    for key, value in tables.items():
        _table(value, (*path, key), lines)


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as TOML: {value!r}")
