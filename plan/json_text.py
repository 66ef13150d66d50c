"""The plan's JSON files (``resources.json``, ``outputs.json``), indented by two spaces, byte for byte what
``json.dumps(value, indent=2, sort_keys=...)`` writes, from orjson's encoder.

Why: Python's ``json`` encodes in C only when nothing is indented; with ``indent`` it runs its pure-Python
encoder, 0.14 s for a 30,000-node plan's 5 MB ``resources.json``, against 0.013 s for orjson (measured in
docs/performance.md). The two spell the same value the same way but for four cases, handled here so the
files do not change: a character outside printable ASCII (``json`` escapes it, ``\\u00e9``, orjson writes
it as UTF-8: escaped here), a float under 1e-4 (``1e-05`` against ``0.00001``) and an integer beyond 64 bits
(orjson refuses it), for which ``json`` writes the text itself, and a value orjson would serialise but
``json`` refuses (a dataclass, a date), handed to ``json`` so it fails as it did. NaN and infinity are not
JSON: orjson writes them as ``null`` where ``json`` writes ``NaN``; no plan holds one (the wire format's
numbers come from what the program declares). ``tests/plan/test_json_text.py`` compares both encoders.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
# How orjson spells a float under 1e-4: in decimal (0.00001) or with a one-digit exponent (3e-7), where
# json writes 1e-05 and 3e-07; each found from its literal (one pattern with both alternatives would try
# every position of a 5 MB text), and only on a line that does not end in a string. Indented, every
# scalar stands on a line of its own (``"key": value,`` or ``value,``), so on a line that ends with a quote
# the literal is inside a string: a GUID (``9980e02c-c2be``) or a name (``tie-3``), which every plan holds.
# A match anywhere else (a key, a line opening an object) only costs the slower encoder.
_SMALL_FLOATS = (
    re.compile(r"0\.0000[^\n]*(?<!\")(?<!\",)$", re.MULTILINE),
    re.compile(r"e-\d(?!\d)[^\n]*(?<!\")(?<!\",)$", re.MULTILINE),
)
# Characters json escapes under ensure_ascii that orjson writes as they are: DEL and whatever is not ASCII
# (looked for only where the text is not all ASCII, which Python knows of every string without reading it).
# Outside a string orjson writes only ASCII, so escaping them where they stand is escaping them inside
# their strings. Written as "not \x00-\x7e", the same characters: the range up to \U0010ffff took 5 ms to
# compile, paid by every plan at import.
_UNESCAPED = re.compile("[^\x00-\x7e]")


def json_text(value: Any, *, sort_keys: bool = False) -> str:
    """``json.dumps(value, indent=2, sort_keys=sort_keys)``, encoded in C."""
    try:
        text = orjson.dumps(value, option=_OPTIONS | (orjson.OPT_SORT_KEYS if sort_keys else 0)).decode()
    except orjson.JSONEncodeError:
        return json.dumps(value, indent=2, sort_keys=sort_keys)
    if any(pattern.search(text) for pattern in _SMALL_FLOATS):
        return json.dumps(value, indent=2, sort_keys=sort_keys)
    if not text.isascii() or "\x7f" in text:
        text = _UNESCAPED.sub(_escaped, text)
    return text


def _escaped(match: re.Match[str]) -> str:
    return json.dumps(match[0])[1:-1]
