"""Proof that the plan carries no secret: every file it writes is scanned before it is kept.

What counts as a secret in supercluster: private keys (any PEM private key block),
Kubernetes bootstrap tokens (``[a-z0-9]{6}.[a-z0-9]{16}``), kubeconfig credentials
(``client-key-data``, ``token:``), storage keys and SAS signatures, and, verbatim, every
value the mocks handed out that the real provider marks secret (``ProgramRun.secret_values``).
Public certificates and secret *names* are fine.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

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
    findings = []
    for value in secret_values:
        start = text.find(value)
        if value and start >= 0:
            findings.append(Finding("", "secret value handed out by a provider", text.count("\n", 0, start) + 1))
    return findings


def scan_files(files: dict[str, str], secret_values: Iterable[str] = ()) -> list[Finding]:
    """Scans ``{path: text}`` for the patterns and for ``secret_values``; identical texts (a pool's shards)
    are scanned once.

    A value holding a private key's header (most of them: every TLS key the mocks hand out) can only be in a
    text where the private-key pattern, which needs nothing around its match, found one: it is looked for
    only there, with the same findings as everywhere (a 30,000-node plan: 28 of 36 values, 21 MB each)."""
    values = sorted(set(secret_values))
    unkeyed = [value for value in values if not _PATTERNS["private key"].search(value)]
    findings: list[Finding] = []
    verdicts: dict[str, list[Finding]] = {}
    for path, text in sorted(files.items()):
        if text not in verdicts:
            found = scan_text("", text)
            keyed = any(finding.kind == "private key" for finding in found)
            verdicts[text] = found + scan_values(text, values if keyed else unkeyed)
        findings += [Finding(path, f.kind, f.line) for f in verdicts[text]]
    return findings
