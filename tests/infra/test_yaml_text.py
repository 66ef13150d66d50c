"""``yaml_text``'s dumpers build the nodes of plain values themselves (``fast_dumper``): the text must be
PyYAML's own, byte for byte, for any document, and for every document the dev and prod plans render."""

from __future__ import annotations

import pytest
import yaml

from infra.boot import cloudinit, yaml_text

_PYYAML = {
    False: getattr(yaml, "CSafeDumper", yaml.SafeDumper),
    True: yaml_text.literal_block_dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)),
}
_FAST = {False: yaml_text.SafeDumper, True: yaml_text.LiteralBlockDumper}


def _both(document, literal_blocks, **options):
    return (
        yaml.dump(document, Dumper=_PYYAML[literal_blocks], **options),
        yaml.dump(document, Dumper=_FAST[literal_blocks], **options),
    )


def test_any_document_is_written_as_pyyamls_own_representer_writes_it():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    scalars = (
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False)
        | st.sampled_from(["", "yes", "null", "1.5", "0x1f", "~", "a: b", "- x", "x\ny\n", "  lead", "#", "8"])
        | st.text(max_size=6)
    )
    values = st.recursive(
        scalars,
        lambda children: (
            st.lists(children, max_size=3)
            | st.lists(children, max_size=3).map(tuple)
            | st.dictionaries(st.text(max_size=4) | st.integers(), children, max_size=3)
        ),
        max_leaves=12,
    )

    @settings(max_examples=200, deadline=None)
    @given(
        values,
        st.booleans(),
        st.booleans(),
        st.sampled_from([False, None, True]),
        st.sampled_from([None, '"']),
        st.booleans(),
    )
    def same(value, literal_blocks, sort_keys, flow_style, style, shared):
        document = {"a": value, "b": value, "c": [value, value]} if shared else value  # anchors and aliases
        expected, written = _both(
            document, literal_blocks, sort_keys=sort_keys, default_flow_style=flow_style, default_style=style
        )
        assert written == expected

    same()


@pytest.mark.parametrize("literal_blocks", [False, True])
def test_what_is_not_a_plain_value_goes_to_pyyaml(literal_blocks):
    import datetime

    class Text(str):
        pass

    shared = {"k": [1, 2]}
    document = {"when": datetime.date(2026, 1, 1), "set": {1}, "t": (shared, shared), "f": 0.5}
    expected, written = _both(document, literal_blocks, sort_keys=False)
    assert written == expected and "&id001" in written
    for refused in (object(), Text("a str subclass, as the safe dumper refuses it")):
        with pytest.raises(yaml.representer.RepresenterError):
            yaml.dump({"x": refused}, Dumper=_FAST[literal_blocks])


@pytest.mark.slow  # dev and prod planned again, every document dumped twice
def test_every_document_dev_and_prod_render_is_pyyamls_own(monkeypatch):
    from tests.conftest import plan_stack

    compared = []
    dump = yaml.dump

    def both(document, stream=None, Dumper=None, **options):  # noqa: N803 - yaml.dump's own name
        written = dump(document, stream, Dumper=Dumper, **options)
        for literal_blocks, fast in _FAST.items():
            if Dumper is fast:
                assert written == dump(document, stream, Dumper=_PYYAML[literal_blocks], **options)
                compared.append(literal_blocks)
        return written

    monkeypatch.setattr(yaml, "dump", both)
    # Each write_files entry is dumped once per process (cloudinit's cache): clear it, so this test compares every
    # document whatever the tests before it on this worker rendered (in CI, with others first, it saw 188 of 300+).
    cloudinit._file_entry.cache_clear()
    for stack in ("dev", "prod"):
        plan_stack(stack)
    assert len(compared) > 300 and set(compared) == {False, True}
