"""The plan's JSON files are written by orjson (plan/json_text.py) and must read exactly as Python's own
``json.dumps(value, indent=2)`` wrote them: the same text for any JSON value, including the spellings
where the two encoders differ (non-ASCII characters, small floats, integers beyond 64 bits)."""

from __future__ import annotations

import dataclasses
import datetime
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plan.json_text import json_text

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
_VALUES = st.recursive(
    _SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=25,
)


@pytest.mark.slow  # seconds: 400 generated documents
@settings(max_examples=400, deadline=None)
@given(_VALUES, st.booleans())
def test_any_json_value_is_written_as_json_dumps_writes_it(value, sort_keys):
    assert json_text(value, sort_keys=sort_keys) == json.dumps(value, indent=2, sort_keys=sort_keys)


@pytest.mark.parametrize(
    "value",
    [
        {"note": "café ☃ 😀", "del": "\x7f", "control": "\x00\x1f", "separator": "\u2028"},
        {"only DEL, in otherwise ASCII text": "\x7f"},
        [1e-05, 3e-07, 1e-10, 0.0001, -2.5e-06, 1e16, 1e22, -0.0, 0.1],
        [2**63, -(2**63), 2**64, -(2**70)],
        {"text that looks like a small float": "0.00001 and 3e-7"},
        {"b": {"d": [], "c": {}}, "a": [{}]},
    ],
)
def test_the_spellings_orjson_differs_in_are_json_dumps_own(value):
    for sort_keys in (False, True):
        assert json_text(value, sort_keys=sort_keys) == json.dumps(value, indent=2, sort_keys=sort_keys)


@dataclasses.dataclass
class _NotJson:
    field: int


@pytest.mark.parametrize("value", [{"a": _NotJson(1)}, [datetime.date(2026, 1, 1)], {1: "int key"}])
def test_what_json_refuses_or_converts_is_left_to_json(value):
    try:
        expected = json.dumps(value, indent=2)
    except TypeError as error:
        with pytest.raises(TypeError, match=str(error)):
            json_text(value)
    else:
        assert json_text(value) == expected


def test_a_plan_is_encoded_by_orjson_not_handed_to_json(prod_plan, monkeypatch):
    """A small float's spelling is looked for only where a number stands: a role definition's GUID
    (``.../9980e02c-...``) or a name like ``tie-3`` inside a string once sent every plan's
    ``resources.json`` through ``json``'s pure-Python encoder."""
    from plan import json_text as module
    from plan.artifacts import recorded

    resources = [recorded(r) for r in prod_plan.registrations]
    expected = json.dumps(resources, indent=2)

    def refused(*args, **kwargs):
        raise AssertionError("handed to json.dumps")

    monkeypatch.setattr(module.json, "dumps", refused)
    assert json_text(resources) == expected
    assert json_text({"id": "/roleDefinitions/9980e02c-c2be-4d73-94e8", "e-5": "tie-3", "n": "0.00001"}) == (
        '{\n  "id": "/roleDefinitions/9980e02c-c2be-4d73-94e8",\n  "e-5": "tie-3",\n  "n": "0.00001"\n}'
    )


def test_the_characters_escaped_where_they_stand_are_del_and_all_beyond_ascii():
    from plan.json_text import _UNESCAPED

    for code in [*range(0x100), 0x2028, 0xD800, 0xFFFF, 0x10000, 0x10FFFF]:
        assert bool(_UNESCAPED.fullmatch(chr(code))) == (code >= 0x7F), hex(code)
