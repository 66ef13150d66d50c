"""A strict reader for nested config objects.

``Section`` walks one mapping of the raw config, remembers the dotted path it came
from, rejects keys nobody asked for, and turns every type or range mistake into a
``ConfigError`` that names the full path (``nodePools[2].maxNodes``).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from infra.errors import MISSING, ConfigError

T = TypeVar("T")


class Section:
    """One object of the config; ``done()`` must be called after the last read."""

    def __init__(self, raw: Any, path: str) -> None:
        if not isinstance(raw, Mapping):
            raise ConfigError(path, raw, "an object (a YAML mapping)")
        self.raw = raw
        self.path = path
        self._seen: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def _take(self, name: str, default: Any) -> Any:
        self._seen.add(name)
        value = self.raw.get(name, MISSING)
        if value is MISSING or value is None:
            if default is MISSING:
                raise ConfigError(self.key(name), MISSING, "a value (this key is required)")
            return default
        return value

    def string(self, name: str, default: Any = MISSING, pattern: str | None = None,
               accepted: str = "a non-empty string", allow_empty: bool = False) -> str:
        value = self._take(name, default)
        if value is None and default is None:
            return None  # type: ignore[return-value]
        if allow_empty and value == "":
            return cast(str, value)
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(self.key(name), value, accepted)
        if pattern is not None and not re.fullmatch(pattern, value):
            raise ConfigError(self.key(name), value, accepted)
        return value

    def integer(self, name: str, default: Any = MISSING, minimum: int | None = None,
                maximum: int | None = None) -> int:
        value = self._take(name, default)
        accepted = _range_text(minimum, maximum)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(self.key(name), value, accepted)
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            raise ConfigError(self.key(name), value, accepted)
        return value

    def boolean(self, name: str, default: Any = MISSING) -> bool:
        value = self._take(name, default)
        if not isinstance(value, bool):
            raise ConfigError(self.key(name), value, "true or false")
        return value

    def cidr(self, name: str, default: Any = MISSING) -> ipaddress.IPv4Network:
        value = self._take(name, default)
        if value is None and default is None:
            return None  # type: ignore[return-value]
        return parse_cidr(self.key(name), value)

    def choice(self, name: str, choices: tuple[str, ...], default: Any = MISSING) -> str:
        value = self._take(name, default)
        if value not in choices:
            raise ConfigError(self.key(name), value, "one of " + ", ".join(choices))
        return cast(str, value)

    def section(self, name: str, default: Any = MISSING) -> Section:
        value = self._take(name, default)
        return Section(value, self.key(name))

    def items(self, name: str, parse: Callable[[Section], T], default: Any = MISSING,
              min_items: int = 0) -> tuple[T, ...]:
        value = self._take(name, default)
        if not isinstance(value, list):
            raise ConfigError(self.key(name), value, "a list")
        if len(value) < min_items:
            raise ConfigError(self.key(name), value, f"a list of at least {min_items} item(s)")
        return tuple(parse(Section(item, f"{self.key(name)}[{i}]")) for i, item in enumerate(value))

    def string_list(self, name: str, default: Any = MISSING) -> tuple[str, ...]:
        value = self._take(name, default)
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(self.key(name), value, "a list of non-empty strings")
        return tuple(value)

    def string_map(self, name: str, default: Any = MISSING, key_pattern: str | None = None,
                   accepted: str = "a mapping of string keys to string values") -> dict[str, str]:
        value = self._take(name, default)
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise ConfigError(self.key(name), value, accepted)
        if key_pattern is not None:
            for k in value:
                if not re.fullmatch(key_pattern, k):
                    raise ConfigError(f"{self.key(name)}.{k}", value[k], accepted)
        return dict(value)

    def done(self) -> None:
        unknown = sorted(set(self.raw) - self._seen, key=str)
        if unknown:
            known = ", ".join(sorted(self._seen)) or "no keys"
            raise ConfigError(self.key(_key_name(unknown[0])), self.raw[unknown[0]],
                              f"a known key (unknown key; this object accepts: {known})")


def _key_name(name: Any) -> str:
    """An unknown key as it goes into a path: quoted when it is empty or holds spaces, dots or brackets,
    so the message still shows where it is."""
    text = str(name)
    return text if re.fullmatch(r"[^\s.\[\]\"]+", text) else json.dumps(text)


def parse_cidr(key: str, value: Any) -> ipaddress.IPv4Network:
    accepted = "an IPv4 CIDR such as 10.0.0.0/16, with no host bits set"
    if not isinstance(value, str) or "/" not in value:
        raise ConfigError(key, value, accepted)
    try:
        return ipaddress.IPv4Network(value, strict=True)
    except ValueError:
        raise ConfigError(key, value, accepted) from None


def _range_text(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f"a whole number from {minimum} to {maximum}"
    if minimum is not None:
        return f"a whole number >= {minimum}"
    if maximum is not None:
        return f"a whole number <= {maximum}"
    return "a whole number"
