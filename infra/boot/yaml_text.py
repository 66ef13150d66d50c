"""YAML text for the files machines and the cluster receive, and for the plan's copies of them.

libyaml's emitter when PyYAML was built with it (it is, from the wheels in requirements.lock): the
same text as the pure-Python emitter, an order of magnitude faster, and a plan renders hundreds of
documents. ``yaml.safe_dump``'s defaults otherwise (sorted keys unless told, safe types only).
"""

from __future__ import annotations

from typing import Any

import yaml

SafeDumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def literal_block_dumper(base: type[yaml.SafeDumper]) -> type[yaml.SafeDumper]:
    """A dumper that writes multi-line strings as literal blocks, so an embedded file reads like the file."""

    class Dumper(base):  # type: ignore[valid-type, misc]
        pass

    def present_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
        style = "|" if "\n" in data else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)

    Dumper.add_representer(str, present_str)
    return Dumper


LiteralBlockDumper = literal_block_dumper(SafeDumper)


def dump(document: Any, *, literal_blocks: bool = False, **options: Any) -> str:
    text: str = yaml.dump(document, Dumper=LiteralBlockDumper if literal_blocks else SafeDumper, **options)
    return text
