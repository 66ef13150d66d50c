"""A strict reader for nested config objects, and the config contract's one declaration.

``Section`` walks one mapping of the raw config, remembers the dotted path it came
from, rejects keys nobody asked for, and turns every type or range mistake into a
``ConfigError`` that names the full path (``nodePools[2].maxNodes``).

Each read *is* the key's declaration: its type (the method), bounds, pattern, default,
what is accepted and its description are the read's arguments, and nothing else states
them. ``recording()`` collects the reads of one validation pass as ``Read`` records; the
config reference (docs/config-reference.md) and ``Pulumi.yaml``'s descriptions are generated
from them (``python -m plan.config_docs --write``), so the documentation cannot describe
a key, bound or default the validator does not have. Why not pydantic: validation here stops at
the first mistake with one line (key, value, what is accepted) and many rules depend on other
keys (a pool's size on its role, a label on the pools); a pydantic model would need a translation
layer for every error kind and still hand-written validators for those rules, and would add a
compiled dependency to every machine that plans.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from infra.config.errors import MISSING, ConfigError

T = TypeVar("T")


@dataclass(frozen=True)
class Read:
    """One key as the validator reads it: ``nodePools[].maxNodes``, ``integer``, its default, what is accepted."""

    path: str
    kind: str
    default: Any
    accepted: str
    description: str


_recorders: list[list[Read]] = []


@contextmanager
def recording() -> Iterator[list[Read]]:
    """Collects every read made inside the block (first read of each path, in order)."""
    reads: list[Read] = []
    _recorders.append(reads)
    try:
        yield reads
    finally:
        _recorders.remove(reads)


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

    def _record(self, name: str, kind: str, default: Any, accepted: str, description: str) -> None:
        if not _recorders:
            return
        path = re.sub(r"\[\d+\]", "[]", self.key(name))
        for reads in _recorders:
            if all(read.path != path for read in reads):
                reads.append(Read(path, kind, default, accepted, description))

    def _take(self, name: str, default: Any) -> Any:
        self._seen.add(name)
        value = self.raw.get(name, MISSING)
        if value is MISSING or value is None:
            if default is MISSING:
                raise ConfigError(self.key(name), MISSING, "a value (this key is required)")
            return default
        return value

    def string(
        self,
        name: str,
        default: Any = MISSING,
        pattern: str | None = None,
        accepted: str = "a non-empty string",
        allow_empty: bool = False,
        description: str = "",
    ) -> str:
        self._record(name, "string", default, accepted, description)
        value = self._take(name, default)
        if value is None and default is None:
            return None  # type: ignore[return-value]
        if allow_empty and value == "":
            return cast(str, value)
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(self.key(name), value, accepted)
        # ASCII only: Python's \d and \w also match other scripts' digits and letters, which Azure and
        # Kubernetes refuse (a version with an Arabic-Indic digit becomes a download URL nobody serves).
        if pattern is not None and not (value.isascii() and re.fullmatch(pattern, value)):
            raise ConfigError(self.key(name), value, accepted)
        return value

    def integer(
        self,
        name: str,
        default: Any = MISSING,
        minimum: int | None = None,
        maximum: int | None = None,
        description: str = "",
    ) -> int:
        accepted = _range_text(minimum, maximum)
        self._record(name, "integer", default, accepted, description)
        value = self._take(name, default)
        if value is None and default is None:
            return None  # type: ignore[return-value]
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(self.key(name), value, accepted)
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            raise ConfigError(self.key(name), value, accepted)
        return value

    def boolean(self, name: str, default: Any = MISSING, description: str = "") -> bool:
        self._record(name, "boolean", default, "true or false", description)
        value = self._take(name, default)
        if not isinstance(value, bool):
            raise ConfigError(self.key(name), value, "true or false")
        return value

    def cidr(self, name: str, default: Any = MISSING, description: str = "") -> ipaddress.IPv4Network:
        self._record(name, "IPv4 CIDR", default, CIDR_ACCEPTED, description)
        value = self._take(name, default)
        if value is None and default is None:
            return None  # type: ignore[return-value]
        return parse_cidr(self.key(name), value)

    def choice(self, name: str, choices: tuple[str, ...], default: Any = MISSING, description: str = "") -> str:
        self._record(name, "string", default, "one of " + ", ".join(choices), description)
        value = self._take(name, default)
        if value not in choices:
            raise ConfigError(self.key(name), value, "one of " + ", ".join(choices))
        return cast(str, value)

    def section(self, name: str, default: Any = MISSING, description: str = "") -> Section:
        self._record(name, "object", default, "an object (a YAML mapping)", description)
        value = self._take(name, default)
        return Section(value, self.key(name))

    def items(
        self,
        name: str,
        parse: Callable[[Section], T],
        default: Any = MISSING,
        min_items: int = 0,
        description: str = "",
    ) -> tuple[T, ...]:
        self._record(
            name,
            "list of objects",
            default,
            f"a list of at least {min_items} object(s)" if min_items else "a list of objects",
            description,
        )
        value = self._take(name, default)
        if not isinstance(value, list):
            raise ConfigError(self.key(name), value, "a list")
        if len(value) < min_items:
            raise ConfigError(self.key(name), value, f"a list of at least {min_items} item(s)")
        return tuple(parse(Section(item, f"{self.key(name)}[{i}]")) for i, item in enumerate(value))

    def string_list(
        self, name: str, default: Any = MISSING, accepted: str = "a list of non-empty strings", description: str = ""
    ) -> tuple[str, ...]:
        self._record(name, "list of strings", default, accepted, description)
        value = self._take(name, default)
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(self.key(name), value, accepted)
        return tuple(value)

    def string_map(
        self,
        name: str,
        default: Any = MISSING,
        key_pattern: str | None = None,
        accepted: str = "a mapping of string keys to string values",
        description: str = "",
    ) -> dict[str, str]:
        self._record(name, "map of strings", default, accepted, description)
        value = self._take(name, default)
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise ConfigError(self.key(name), value, accepted)
        if key_pattern is not None:
            for k in value:
                if not (k.isascii() and re.fullmatch(key_pattern, k)):
                    raise ConfigError(f"{self.key(name)}.{k}", value[k], accepted)
        return dict(value)

    def done(self) -> None:
        unknown = sorted(set(self.raw) - self._seen, key=str)
        if unknown:
            known = ", ".join(sorted(self._seen)) or "no keys"
            raise ConfigError(
                self.key(_key_name(unknown[0])),
                self.raw[unknown[0]],
                f"a known key (unknown key; this object accepts: {known})",
            )


def _key_name(name: Any) -> str:
    """An unknown key as it goes into a path: quoted when it is empty or holds spaces, dots or brackets,
    so the message still shows where it is."""
    text = str(name)
    return text if re.fullmatch(r"[^\s.\[\]\"]+", text) else json.dumps(text)


CIDR_ACCEPTED = "an IPv4 CIDR such as 10.0.0.0/16, with no host bits set"


def parse_cidr(key: str, value: Any) -> ipaddress.IPv4Network:
    accepted = CIDR_ACCEPTED
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
