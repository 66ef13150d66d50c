"""iptables rulesets a machine loads at boot, before kubelet and kube-proxy start.

A ruleset lives in chains of its own (``SUPERCLUSTER-...``), so it never fights
kube-proxy over the built-in chains. It is loaded with ``iptables-restore --noflush``:
declaring a chain in the restore file empties and refills exactly that chain and
leaves every other rule alone. Each chain is then hooked into its built-in chain by
one jump, added only if missing, so loading again (a unit restart) never duplicates a
rule or double-counts a packet.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from infra.boot import systemd
from infra.boot.cloudinit import CloudConfig

RULES_DIR = "/etc/supercluster/iptables"
BUILTIN_CHAINS = {
    "filter": ("INPUT", "FORWARD", "OUTPUT"),
    "nat": ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"),
    "mangle": ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"),
}
# iptables' comment match takes at most 256 characters (iptables-extensions(8), "comment").
MAX_COMMENT = 256
_CHAIN_NAME = r"SUPERCLUSTER-[A-Z0-9-]{1,15}"  # chain names are at most 28 characters


@dataclass(frozen=True)
class Rule:
    """One rule: what it matches, an optional comment (what iptables-exporter reports), and its target
    (none: the rule only counts)."""

    match: tuple[str, ...] = ()
    target: str | None = None
    comment: str | None = None

    def render(self, chain: str) -> str:
        words = ["-A", chain, *self.match]
        if self.comment is not None:
            words += ["-m", "comment", "--comment", f'"{self.comment}"']
        if self.target is not None:
            words += ["-j", self.target]
        return " ".join(words)


@dataclass(frozen=True)
class Chain:
    table: str  # "filter" | "nat" | "mangle"
    name: str  # ours, e.g. SUPERCLUSTER-ACCT-INPUT
    hook: str  # the built-in chain whose first rule jumps here
    rules: tuple[Rule, ...]

    def __post_init__(self) -> None:
        if self.hook not in BUILTIN_CHAINS.get(self.table, ()):
            raise ValueError(f"{self.name}: {self.table} has no built-in chain {self.hook}")
        if not re.fullmatch(_CHAIN_NAME, self.name):
            raise ValueError(f"{self.name}: chain names are SUPERCLUSTER-<at most 15 of A-Z, 0-9, ->")
        for rule in self.rules:
            if rule.comment is not None and ('"' in rule.comment or len(rule.comment) > MAX_COMMENT):
                raise ValueError(f"{self.name}: comment {rule.comment!r} has a quote or is too long")


@dataclass(frozen=True)
class Ruleset:
    name: str  # file and unit name, e.g. "traffic-accounting"
    description: str
    chains: tuple[Chain, ...]

    @property
    def rules_path(self) -> str:
        return f"{RULES_DIR}/{self.name}.rules"

    @property
    def script_path(self) -> str:
        return f"/usr/local/sbin/supercluster-{self.name}"

    @property
    def unit(self) -> str:
        return f"supercluster-{self.name}.service"


def render_restore(ruleset: Ruleset) -> str:
    """The ``iptables-restore --noflush`` input: one block per table, our chains declared and filled."""
    lines = [
        f"# Written by supercluster: {ruleset.description}.",
        f"# Loaded by {ruleset.script_path} (iptables-restore --noflush), hooked once per chain.",
    ]
    for table in BUILTIN_CHAINS:
        chains = [chain for chain in ruleset.chains if chain.table == table]
        if not chains:
            continue
        lines.append(f"*{table}")
        lines += [f":{chain.name} - [0:0]" for chain in chains]
        lines += [rule.render(chain.name) for chain in chains for rule in chain.rules]
        lines.append("COMMIT")
    return "\n".join(lines) + "\n"


def apply_script(ruleset: Ruleset) -> str:
    """Loads the rules file, then adds each chain's jump only if it is not there yet."""
    lines = [
        "#!/bin/bash",
        f"# Written by supercluster: loads {ruleset.name} ({ruleset.description}).",
        "set -euo pipefail",
        f"iptables-restore --wait --noflush {ruleset.rules_path}",
        "hook() {  # hook TABLE BUILTIN CHAIN: jump to CHAIN first thing in BUILTIN, exactly once",
        '  iptables --wait -t "$1" -C "$2" -j "$3" 2>/dev/null || iptables --wait -t "$1" -I "$2" 1 -j "$3"',
        "}",
    ]
    lines += [f"hook {chain.table} {chain.hook} {chain.name}" for chain in ruleset.chains]
    return "\n".join(lines) + "\n"


def add_ruleset(cloud: CloudConfig, ruleset: Ruleset, before: Sequence[str]) -> None:
    """Writes the rules and their loader, and a boot unit that loads them before any interface is up
    (like netfilter-persistent: no default dependencies, ``Before=network-pre.target``), before
    ``before`` and wanted by it, so the rules are in place whenever those units start, on the first
    boot (when cloud-init starts the unit itself) as on every other."""
    if "iptables" not in cloud.packages:
        cloud.packages.append("iptables")
    cloud.add(ruleset.rules_path, render_restore(ruleset))
    cloud.add(ruleset.script_path, apply_script(ruleset), permissions="0755")
    cloud.add(
        f"/etc/systemd/system/{ruleset.unit}",
        systemd.unit(
            f"supercluster: {ruleset.description}",
            [ruleset.script_path],
            after=["systemd-modules-load.service", "local-fs.target"],
            wants=["network-pre.target"],
            service={"Type": "oneshot", "RemainAfterExit": "true", "Restart": "on-failure", "RestartSec": "5"},
            unit_extra={
                "DefaultDependencies": "no",
                "Before": " ".join(["network-pre.target", "shutdown.target", *before]),
                "Conflicts": "shutdown.target",
            },
            wanted_by=" ".join(["multi-user.target", *before]),
        ),
    )
    cloud.runcmd.append(["systemctl", "enable", "--now", ruleset.unit])
