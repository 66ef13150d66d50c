"""The one error a user's config mistake may produce.

Every check in ``infra/`` raises ``ConfigError`` so that ``__main__.py`` (as a
``pulumi.RunError``) and ``python -m plan`` (exit 2) can print a single
line naming the key, the value and what would be accepted, never a traceback.
"""

from __future__ import annotations

from typing import Any

NAMESPACE = "supercluster"


class ConfigError(ValueError):
    """A config value that cannot be planned; ``str()`` is the one-line message."""

    def __init__(self, key: str, value: Any, accepted: str) -> None:
        self.key = key
        self.value = value
        self.accepted = accepted
        super().__init__(self.message)

    @property
    def message(self) -> str:
        key = _printable(self.key)
        # A CLI flag (--config, --stack) or a file position (Pulumi.dev.yaml:3:1) is shown as it is.
        qualified = key if ":" in key or key.startswith("--") else f"{NAMESPACE}:{key}"
        shown = _short(self.value)
        return f"invalid config {qualified} = {shown}: expected {self.accepted}"


def _printable(text: str) -> str:
    """A key as typed, with control characters (a newline in a YAML key) escaped: the message stays one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def _short(value: Any, limit: int = 120) -> str:
    text = "<missing>" if value is _MISSING else repr(value)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Missing:
    def __repr__(self) -> str:  # pragma: no cover - only for debugging output
        return "<missing>"


_MISSING: Any = _Missing()
MISSING: Any = _MISSING
