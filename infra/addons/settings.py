"""Strict reading of one add-on's settings (``addons.<key>.*`` in config)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infra.errors import ConfigError
from infra.schema import Section

DURATION_PATTERN = r"[1-9][0-9]*(s|m|h)"


def section(key: str, raw: Mapping[str, Any]) -> Section:
    """The settings of ``addons.<key>`` (without ``enabled``, which infra.config reads)."""
    return Section(raw, f"addons.{key}")


def duration(s: Section, name: str, default: str, maximum_seconds: int | None = None) -> str:
    """A Go duration as Kubernetes components take it: ``30s``, ``10m``, ``1h``."""
    value = s.string(name, default, pattern=DURATION_PATTERN, accepted="a duration such as 30s, 10m or 1h")
    if maximum_seconds is not None and seconds(value) > maximum_seconds:
        raise ConfigError(s.key(name), value, f"a duration of at most {maximum_seconds}s")
    return value


def seconds(value: str) -> int:
    return int(value[:-1]) * {"s": 1, "m": 60, "h": 3600}[value[-1]]
