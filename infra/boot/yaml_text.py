"""YAML text for the files machines and the cluster receive, and for the plan's copies of them.

libyaml's emitter when PyYAML was built with it (it is, from the wheels in requirements.lock): the
same text as the pure-Python emitter, an order of magnitude faster, and a plan renders hundreds of
documents. ``yaml.safe_dump``'s defaults otherwise (sorted keys unless told, safe types only).

In front of it, PyYAML's representer (Python objects to YAML nodes) and resolver (which scalars would read
back as another type, so must be quoted) are Python, called for every value: ``fast_dumper`` builds the
same nodes for plain dicts, lists, strings, integers, booleans and None, anchors included, in one method,
and remembers each scalar's resolution; anything else goes to PyYAML's own. Compared with PyYAML's on
generated documents and on every document dev and prod render (``tests/infra/test_yaml_text.py``).
"""

from __future__ import annotations

import contextlib
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

_CSafeDumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

_STR = "tag:yaml.org,2002:str"
_INT = "tag:yaml.org,2002:int"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
# Bounded: a test process renders many clusters; a 30,000-node plan holds about 40,000 distinct scalars.
_RESOLVED_MAX = 200_000


def literal_block_dumper(base: type[yaml.SafeDumper]) -> type[yaml.SafeDumper]:
    """A dumper that writes multi-line strings as literal blocks, so an embedded file reads like the file."""

    class Dumper(base):  # type: ignore[valid-type, misc]
        pass

    def present_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
        style = "|" if "\n" in data else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)

    Dumper.add_representer(str, present_str)
    return Dumper


def fast_dumper(base: type[yaml.SafeDumper], *, literal_blocks: bool) -> type[yaml.SafeDumper]:
    """``base``, or ``literal_block_dumper(base)``, with the nodes of plain values built in one method:
    the nodes PyYAML's ``SafeRepresenter`` builds (a dict or list seen before is the same node, written as
    an alias), and each implicit scalar's resolution remembered (there are no path resolvers)."""
    resolved: dict[str, str] = {}
    represent_base = literal_block_dumper(base) if literal_blocks else base

    class Dumper(represent_base):  # type: ignore[valid-type, misc]
        def represent_data(self, data: Any) -> Node:
            kind = type(data)
            if kind is str:
                return ScalarNode(_STR, data, style="|" if literal_blocks and "\n" in data else self.default_style)
            if kind is dict or kind is list:
                seen: Node | None = self.represented_objects.get(id(data))
                if seen is not None:
                    return seen
                self.object_keeper.append(data)
                children: list[Node] = []
                node: MappingNode | SequenceNode
                if kind is dict:
                    items = list(data.items())
                    if self.sort_keys:
                        with contextlib.suppress(TypeError):  # unsortable keys stay in their order, as PyYAML's
                            items = sorted(items)
                    pairs: list[tuple[Node, Node]] = []
                    node = MappingNode(_MAP, pairs, flow_style=self.default_flow_style)
                    self.represented_objects[id(data)] = node
                    for key, value in items:
                        pair = (self.represent_data(key), self.represent_data(value))
                        pairs.append(pair)
                        children += pair
                else:
                    node = SequenceNode(_SEQ, children, flow_style=self.default_flow_style)
                    self.represented_objects[id(data)] = node
                    for item in data:
                        children.append(self.represent_data(item))
                if self.default_flow_style is None:  # flow style only where every child is a plain scalar
                    node.flow_style = all(isinstance(child, ScalarNode) and not child.style for child in children)
                return node
            if kind is bool:
                return ScalarNode(_BOOL, "true" if data else "false", style=self.default_style)
            if kind is int:
                return ScalarNode(_INT, str(data), style=self.default_style)
            if data is None:
                return ScalarNode(_NULL, "null", style=self.default_style)
            node_of_other: Node = super().represent_data(data)
            return node_of_other

        def resolve(self, kind: type[Node], value: Any, implicit: Any) -> str:
            if kind is not ScalarNode or self.yaml_path_resolvers:
                tag: str = super().resolve(kind, value, implicit)
                return tag
            if not implicit[0]:
                default: str = self.DEFAULT_SCALAR_TAG
                return default
            found = resolved.get(value)
            if found is None:
                if len(resolved) >= _RESOLVED_MAX:
                    resolved.clear()
                found = str(super().resolve(kind, value, implicit))
                resolved[value] = found
            return found

    return Dumper


SafeDumper = fast_dumper(_CSafeDumper, literal_blocks=False)
LiteralBlockDumper = fast_dumper(_CSafeDumper, literal_blocks=True)


def dump(document: Any, *, literal_blocks: bool = False, **options: Any) -> str:
    text: str = yaml.dump(document, Dumper=LiteralBlockDumper if literal_blocks else SafeDumper, **options)
    return text
