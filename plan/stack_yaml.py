"""Reads a stack file as the Pulumi CLI does: YAML 1.2, no duplicate keys, JSON values only.

The Pulumi CLI reads ``Pulumi.yaml`` and ``Pulumi.<stack>.yaml`` with Go's ``gopkg.in/yaml.v3``
(a YAML 1.2 parser that refuses a duplicated mapping key) and hands the program JSON. PyYAML on
its own follows YAML 1.1, where ``1:30`` is 90, ``yes`` is true and a duplicated key silently keeps
the last value, so the offline plan would plan a different cluster than ``pulumi up`` deploys.
Here PyYAML only scans and composes; every plain scalar is resolved by the YAML 1.2 core schema
(yaml.org/spec/1.2.2 §10.3.2), and anything Pulumi would not hand over as JSON stops with one line
naming the file, line and column:

- a duplicated key, a tag (``!!binary``, ``!!set``, ``!!timestamp``, ``!custom``), an anchor or alias,
  a key that is not a string, ``.inf``/``.nan`` (JSON has neither), bytes that are not UTF-8;
- a plain scalar that YAML 1.2 and Pulumi's Go reader resolve differently, so that no reading of it
  is safe: an integer with a leading zero (``017``: 17 in YAML 1.2, 15 in yaml.v3), digits with
  underscores (``1_000``: a string in YAML 1.2, 1000 in yaml.v3), ``0b`` binary (``0b101``) and a
  date (``2024-01-01``: a string in YAML 1.2, ``2024-01-01T00:00:00Z`` from yaml.v3).
  Quoting such a value makes it a string everywhere.

A whole-valued float (``1e3``, ``5.0``) becomes an integer, as it does on its way through JSON:
Go's encoding/json writes float64 1000 as ``1000``.
"""

from __future__ import annotations

import copy
import functools
import math
import re
from pathlib import Path
from typing import Any

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from infra.config.errors import ConfigError

STR_TAG, SEQ_TAG, MAP_TAG = "tag:yaml.org,2002:str", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"

# YAML 1.2.2 §10.3.2, the core schema's tag resolution for plain scalars.
CORE_NULL = re.compile(r"null|Null|NULL|~|")
CORE_BOOL = re.compile(r"true|True|TRUE|false|False|FALSE")
CORE_INT = re.compile(r"[-+]?[0-9]+")
CORE_OCTAL = re.compile(r"0o[0-7]+")
CORE_HEX = re.compile(r"0x[0-9a-fA-F]+")
CORE_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
CORE_INF = re.compile(r"[-+]?\.(inf|Inf|INF)")
CORE_NAN = re.compile(r"\.(nan|NaN|NAN)")
# Plain scalars YAML 1.2 and gopkg.in/yaml.v3 (resolve.go: strconv.ParseInt(base 0) after removing
# underscores) read differently.
AMBIGUOUS = (
    (
        re.compile(r"[-+]?0[0-9]+"),
        "an integer without a leading zero (017 is 17 in YAML 1.2 but 15 to Pulumi), or a quoted string",
    ),
    (
        re.compile(r"[-+]?[0-9][0-9_]*_[0-9_]*(\.[0-9_]*)?"),
        "digits without '_' (1_000 is a string in YAML 1.2 but 1000 to Pulumi), or a quoted string",
    ),
    (
        re.compile(r"[-+]?0b[01_]+"),
        "a decimal integer (0b binary is a string in YAML 1.2 but a number to Pulumi), or a quoted string",
    ),
    (
        re.compile(r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}([Tt ].*)?"),
        "a quoted string (a date is text in YAML 1.2 but a timestamp to Pulumi: 2024-01-01T00:00:00Z)",
    ),
)
# Go's encoding/json writes a float64 without an exponent below 1e21 (strconv 'f' format).
JSON_INTEGER_FLOAT_LIMIT = 1e21


class _Loader(yaml.SafeLoader):
    """Scans and composes only; no YAML 1.1 implicit typing (every plain scalar stays a str node)."""

    yaml_implicit_resolvers: dict = {}

    def compose_node(self, parent, index):  # type: ignore[override]
        if self.check_event(AliasEvent):
            event = self.peek_event()
            raise _Refused(event.start_mark, f"no alias (*{event.anchor}): write the value out")
        event = self.peek_event()
        if getattr(event, "anchor", None) is not None:
            raise _Refused(event.start_mark, f"no anchor (&{event.anchor}): Pulumi's config is plain JSON")
        return super().compose_node(parent, index)


class _Refused(Exception):
    def __init__(self, mark: Any, accepted: str) -> None:
        super().__init__(accepted)
        self.mark = mark
        self.accepted = accepted


def where(source: str, mark: Any) -> str:
    """``Pulumi.dev.yaml:12:5``: file, 1-based line and column."""
    return f"{source}:{mark.line + 1}:{mark.column + 1}"


def load_text(text: str, source: str) -> Any:
    """The JSON value of one YAML document, or ``ConfigError`` (key ``source:line:column``).

    A text read before is not parsed again: the composer is pure Python (it keeps the marks that name a
    line and column), and the test suite reads the same few files over a thousand times. The caller gets
    its own copy, free to change."""
    return copy.deepcopy(_parsed(text, source))


@functools.lru_cache(maxsize=64)
def _parsed(text: str, source: str) -> Any:
    try:
        node = yaml.compose(text, Loader=_Loader)
    except _Refused as refused:
        raise ConfigError(where(source, refused.mark), _excerpt(text, refused.mark), refused.accepted) from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        problem = " ".join(str(error.problem or error.context or "a YAML syntax error").split())
        if mark is None:
            raise ConfigError(source, None, f"valid YAML ({problem})") from None
        raise ConfigError(where(source, mark), _excerpt(text, mark), f"valid YAML ({problem})") from None
    except yaml.YAMLError as error:  # a reader error: a character YAML does not allow
        mark = getattr(error, "position", None)
        line = text.count("\n", 0, mark) + 1 if isinstance(mark, int) else 1
        column = mark - (text.rfind("\n", 0, mark) + 1) + 1 if isinstance(mark, int) else 1
        raise ConfigError(
            f"{source}:{line}:{column}", None, "printable characters only (YAML refuses control characters)"
        ) from None
    if node is None:
        return None
    try:
        return _value(node)
    except _Refused as refused:
        raise ConfigError(where(source, refused.mark), _excerpt(text, refused.mark), refused.accepted) from None


def load_file(path: Path) -> Any:
    """``load_text`` of a file that must be UTF-8 (a BOM is allowed), as the Pulumi CLI reads it."""
    source = path.name
    data = path.read_bytes()
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        raise ConfigError(
            f"{source}:{line}:{column}",
            data[error.start : error.start + 4],
            "a UTF-8 file (save it as UTF-8, not UTF-16 or Latin-1)",
        ) from None
    return load_text(text, source)


def resolve_plain(text: str) -> Any:
    """A plain (unquoted) scalar by the YAML 1.2 core schema; ``ValueError`` when it is ambiguous
    (see the module docstring) or not JSON-representable."""
    for pattern, accepted in AMBIGUOUS:
        if pattern.fullmatch(text):
            raise ValueError(accepted)
    if CORE_NULL.fullmatch(text):
        return None
    if CORE_BOOL.fullmatch(text):
        return text.lower() == "true"
    if CORE_INT.fullmatch(text):
        return int(text)
    if CORE_OCTAL.fullmatch(text):
        return int(text[2:], 8)
    if CORE_HEX.fullmatch(text):
        return int(text[2:], 16)
    if CORE_INF.fullmatch(text) or CORE_NAN.fullmatch(text):
        raise ValueError("a finite number (JSON, which Pulumi hands the program, has no .inf or .nan)")
    if CORE_FLOAT.fullmatch(text):
        number = float(text)
        if math.isinf(number):
            raise ValueError("a finite number (JSON, which Pulumi hands the program, has no infinity)")
        return int(number) if number.is_integer() and abs(number) < JSON_INTEGER_FLOAT_LIMIT else number
    return text


def _value(node: Any) -> Any:
    if isinstance(node, ScalarNode):
        if node.tag != STR_TAG:
            raise _Refused(
                node.start_mark,
                f"a value without a tag (no {node.tag.replace('tag:yaml.org,2002:', '!!')}; "
                "Pulumi's config is plain JSON)",
            )
        if node.style is not None:  # quoted or block scalar: always a string
            return node.value
        try:
            return resolve_plain(node.value)
        except ValueError as error:
            raise _Refused(node.start_mark, str(error)) from None
    if isinstance(node, SequenceNode):
        if node.tag != SEQ_TAG:
            raise _Refused(node.start_mark, f"a list without a tag (no {node.tag}; Pulumi's config is plain JSON)")
        return [_value(item) for item in node.value]
    if isinstance(node, MappingNode):
        if node.tag != MAP_TAG:
            raise _Refused(
                node.start_mark,
                "a mapping without a tag (no "
                f"{node.tag.replace('tag:yaml.org,2002:', '!!')}; Pulumi's config is plain JSON)",
            )
        result: dict[str, Any] = {}
        first_seen: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = _value(key_node)
            if not isinstance(key, str):
                raise _Refused(key_node.start_mark, f"a string key (not {key!r}; JSON keys are strings: quote it)")
            if key in first_seen:
                raise _Refused(
                    key_node.start_mark,
                    f"each key once (duplicate key {key!r}, first at line "
                    f"{first_seen[key].line + 1}: YAML 1.2 refuses it, and so does Pulumi)",
                )
            first_seen[key] = key_node.start_mark
            result[key] = _value(value_node)
        return result
    raise _Refused(node.start_mark, "a YAML value")  # pragma: no cover - composer yields only these three


def _excerpt(text: str, mark: Any) -> str:
    """The offending line's text from the mark (shortened by ConfigError), so the message shows what is wrong."""
    lines = text.splitlines()
    if mark is None or mark.line >= len(lines):
        return ""
    return lines[mark.line][mark.column :].strip()
