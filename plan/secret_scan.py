"""Proof that the plan carries no secret: every file it writes is scanned before it is kept.

What counts as a secret in supercluster: private keys (any PEM private key block),
Kubernetes bootstrap tokens (``[a-z0-9]{6}.[a-z0-9]{16}``), kubeconfig credentials
(``client-key-data``, ``token:``), storage keys and SAS signatures, and, verbatim, every
value the mocks handed out that the real provider marks secret (``ProgramRun.secret_values``).
Public certificates and secret *names* are fine.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

# Each pattern opens with a literal, so the regex engine jumps from one occurrence of it to the next
# instead of trying every position of a 10 MB resources.json (30x faster); context a match needs before
# its literal is checked by a lookbehind once the literal is found.
_PATTERNS = {
    "private key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    # <6 chars>.<16 chars>, found from its dot.
    "bootstrap token": re.compile(r"\.[a-z0-9]{16}\b(?<=\b[a-z0-9]{6}\.[a-z0-9]{16})"),
    "kubeconfig client key": re.compile(r"client-key-data:\s*\S{16,}"),
    "kubeconfig token": re.compile(r"^\s*token:\s*\S{8,}", re.MULTILINE),
    "storage account key": re.compile(r"AccountKey=[A-Za-z0-9+/=]{20,}"),
    "SAS signature": re.compile(r"sig=(?<=[?&]sig=)[A-Za-z0-9%+/=]{20,}"),
}
# Matched in the lower-cased text (a case-insensitive pattern cannot open with a fast literal).
# Not inside a longer name: the type token random:index/randomPassword:RandomPassword is no leak;
# nor is a masked value, quoted either way (JSON's "[secret]", YAML's '[secret]').
_CASELESS_PATTERNS = {
    "password": re.compile(r"password(?<![a-z]password)[\"']?\s*[:=]\s*[\"']?(?!\[secret\])[^\s\"']{6,}"),
}
# Patterns that cannot match without this literal are skipped when it is absent.
_REQUIRED_LITERAL = {"kubeconfig token": "token:"}


_NO_CUTS: Mapping[str, Sequence[str]] = MappingProxyType({})


@dataclass(frozen=True)
class Finding:
    path: str
    kind: str
    line: int


def scan_text(path: str, text: str) -> list[Finding]:
    findings = []
    for patterns, haystack in ((_PATTERNS, text), (_CASELESS_PATTERNS, text.lower())):
        for kind, pattern in patterns.items():
            if _REQUIRED_LITERAL.get(kind, "") not in haystack:
                continue
            for match in pattern.finditer(haystack):
                findings.append(Finding(path, kind, haystack.count("\n", 0, match.start()) + 1))
    return findings


def scan_values(text: str, secret_values: Iterable[str]) -> list[Finding]:
    """Where any of ``secret_values`` (what the mocks handed out as secrets) appears verbatim."""
    lines = _first_lines(text, secret_values)
    return [Finding("", "secret value handed out by a provider", line) for line in lines.values()]


def _first_lines(text: str, values: Iterable[str]) -> dict[str, int]:
    """The line of each of ``values`` that ``text`` holds, where it first appears."""
    lines = {}
    for value in values:
        start = text.find(value)
        if value and start >= 0:
            lines[value] = text.count("\n", 0, start) + 1
    return lines


def scan_files(
    files: dict[str, str], secret_values: Iterable[str] = (), cuts: Mapping[str, Sequence[str]] = _NO_CUTS
) -> list[Finding]:
    """Scans ``{path: text}`` for the patterns and for ``secret_values``; identical texts (a pool's shards)
    are scanned once, and so are identical pieces of texts (``_pieces``: the shards of an InfiniBand pool,
    whose cloud-inits differ in one file of forty). ``cuts``: pieces a caller already holds for some texts (a
    rendered cloud-init's write_files items, ``artifacts.cloud_init_pieces``), taken where they are cut as
    ``_pieces`` cuts (``_cut_as_pieces``), instead of finding the cuts in the text again.

    A value holding a private key's header (most of them: every TLS key the mocks hand out) can only be in a
    text where the private-key pattern, which needs nothing around its match, found one: it is looked for
    only there, with the same findings as everywhere (a 30,000-node plan: 28 of 36 values, 21 MB each)."""
    values = sorted(set(secret_values))
    unkeyed = [value for value in values if not _PATTERNS["private key"].search(value)]
    findings: list[Finding] = []
    verdicts: dict[str, list[Finding]] = {}
    pieces: dict[str, _Piece] = {}
    for path, text in sorted(files.items()):
        if text not in verdicts:
            verdicts[text] = _scan(text, values, unkeyed, pieces, cuts.get(text))
        findings += [Finding(path, f.kind, f.line) for f in verdicts[text]]
    return findings


# A text is scanned in pieces cut after a newline that opens an unindented YAML sequence item (``- ``, as each
# write_files item of a cloud-init): no pattern matches across such a cut (the patterns that may span lines do so
# only through blanks, before a ``:`` or ``=`` or a run of non-blank characters, and ``- `` is neither), nor does
# a value that holds no newline followed by ``-``. Pieces of a text are grouped ``_ITEMS_PER_PIECE`` items at a
# time: fewer pieces to look up, and a group that repeats between texts is still scanned once.
_CUT = "\n- "
_ITEMS_PER_PIECE = 4
_KINDS = (*_PATTERNS, *_CASELESS_PATTERNS)


@dataclass(frozen=True)
class _Piece:
    """What one piece of text holds: its pattern findings (lines within it) and the first line within it of
    each value looked for in it; whether it holds a private key's header; how many newlines it holds."""

    found: list[Finding]
    values: dict[str, int]
    keyed: bool
    newlines: int


def _pieces(text: str) -> list[str]:
    """``text`` cut after every ``_ITEMS_PER_PIECE``-th newline that opens a line with ``- ``; joined, the
    pieces are ``text``. Each piece is sliced from ``text`` once, where its cut is found."""
    pieces = []
    start = 0
    found = text.find(_CUT)
    items = 0
    while found >= 0:
        items += 1
        if items == _ITEMS_PER_PIECE:
            pieces.append(text[start : found + 1])  # the newline ends a piece, the item's "- " opens the next
            start = found + 1
            items = 0
        found = text.find(_CUT, found + 1)
    pieces.append(text[start:])
    return pieces


def _cut_as_pieces(text: str, pieces: Sequence[str]) -> bool:
    """Whether ``pieces``, joined, are ``text`` and each is cut right after a newline that opens a line with
    ``- ``, as ``_pieces`` cuts (how many items a piece holds does not matter: no pattern matches across any such
    cut)."""
    offset = 0
    for index, piece in enumerate(pieces):
        if index and not (offset and text[offset - 1] == "\n" and text.startswith("- ", offset)):
            return False
        if not text.startswith(piece, offset):
            return False
        offset += len(piece)
    return offset == len(text)


def _scan(
    text: str, values: list[str], unkeyed: list[str], known: dict[str, _Piece], given: Sequence[str] | None = None
) -> list[Finding]:
    """The findings of one text, in the order the whole text's scan lists them (each pattern's matches in
    order, then each value's first place); ``given``: pieces of it a caller holds, taken if ``_cut_as_pieces``."""
    by_kind: dict[str, list[Finding]] = {}
    found_values: dict[str, int] = {}
    keyed = False
    line = 0
    for piece in given if given is not None and _cut_as_pieces(text, given) else _pieces(text):
        verdict = known.get(piece)
        if verdict is None:
            found = scan_text("", piece)
            piece_keyed = any(finding.kind == "private key" for finding in found)
            searched = [value for value in (values if piece_keyed else unkeyed) if "\n-" not in value]
            verdict = known[piece] = _Piece(found, _first_lines(piece, searched), piece_keyed, piece.count("\n"))
        for finding in verdict.found:
            by_kind.setdefault(finding.kind, []).append(Finding("", finding.kind, finding.line + line))
        for value, value_line in verdict.values.items():
            found_values.setdefault(value, value_line + line)
        keyed = keyed or verdict.keyed
        line += verdict.newlines
    findings = [finding for kind in _KINDS for finding in by_kind.get(kind, [])]
    for value in values if keyed else unkeyed:
        if "\n-" in value:  # it may span a cut: looked for in the whole text
            findings += scan_values(text, [value])
        elif value in found_values:
            findings.append(Finding("", "secret value handed out by a provider", found_values[value]))
    return findings
