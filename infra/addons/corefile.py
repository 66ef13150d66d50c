"""Renders CoreDNS configuration (the Corefile) from plain data, so no add-on writes it by hand.

A Corefile is a list of server blocks; each holds directives, and a directive may hold a
nested block (coredns.io/manual/configuration). ``Directive("cache", ("30",))`` renders
``cache 30``; a directive with ``block`` renders ``name args {`` ... ``}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Directive:
    name: str
    args: tuple[str, ...] = ()
    block: tuple[Directive, ...] = field(default=())


@dataclass(frozen=True)
class ServerBlock:
    zones: tuple[str, ...]  # e.g. ("cluster.local:53",) or (".:53",)
    directives: tuple[Directive, ...]


def render(blocks: list[ServerBlock]) -> str:
    lines: list[str] = []
    for server in blocks:
        lines.append(" ".join(server.zones) + " {")
        for directive in server.directives:
            lines += _directive(directive, depth=1)
        lines.append("}")
    return "\n".join(lines) + "\n"


def _directive(directive: Directive, depth: int) -> list[str]:
    indent = "    " * depth
    head = " ".join((directive.name, *directive.args))
    if not directive.block:
        return [indent + head]
    lines = [f"{indent}{head} {{"]
    for child in directive.block:
        lines += _directive(child, depth + 1)
    return lines + [indent + "}"]


def d(name: str, *args: str, block: tuple[Directive, ...] = ()) -> Directive:
    """Short constructor: ``d("forward", ".", "/etc/resolv.conf", block=(d("max_concurrent", "1000"),))``."""
    return Directive(name, tuple(args), block)
