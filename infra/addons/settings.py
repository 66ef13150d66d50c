"""Strict reading of one add-on's settings (``addons.<key>.*`` in config)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infra.errors import ConfigError
from infra.schema import Section

DURATION_PATTERN = r"[1-9][0-9]*(s|m|h)"
# Go's time.Duration (and Prometheus's model.Duration) is an int64 count of nanoseconds, so at most
# 2562047h47m16.854775807s (pkg.go.dev/time#Duration); a longer flag value makes the component exit.
GO_MAX_DURATION_SECONDS = (2**63 - 1) // 10**9
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


def section(key: str, raw: Mapping[str, Any]) -> Section:
    """The settings of ``addons.<key>`` (without ``enabled``, which infra.config reads)."""
    return Section(raw, f"addons.{key}")


def duration(s: Section, name: str, default: str, maximum_seconds: int | None = None) -> str:
    """A Go duration as Kubernetes components take it: ``30s``, ``10m``, ``1h``."""
    value = s.string(name, default, pattern=DURATION_PATTERN, accepted="a duration such as 30s, 10m or 1h")
    check_go_duration(s, name, value)
    if maximum_seconds is not None and seconds(value) > maximum_seconds:
        raise ConfigError(s.key(name), value, f"a duration of at most {maximum_seconds}s")
    return value


def check_go_duration(s: Section, name: str, value: str) -> None:
    """Refuses a duration longer than Go's time.Duration holds (``99999999h``)."""
    if seconds(value) > GO_MAX_DURATION_SECONDS:
        raise ConfigError(s.key(name), value, "a duration Go's time.Duration holds (at most 2562047h)")


def seconds(value: str) -> int:
    return int(value[:-1]) * UNIT_SECONDS[value[-1]]
