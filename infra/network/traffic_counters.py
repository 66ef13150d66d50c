"""Per-node traffic accounting (7,500-node post): count internet traffic apart from intra-cluster traffic.

Mangle-table rules that only count, never change a packet. iptables keeps packet and
byte counters per rule, and iptables-exporter turns every rule whose comment starts
with ``iptables-exporter`` into a Prometheus series labelled with the rest of the
comment (``traffic=internet-in``). The post's rules negate one hard-coded
``10.0.0.0/8``; these use the cluster's own ranges and tell three kinds of peer apart:

- ``cluster``: ``network.addressSpace`` (every node and pod of every cluster VNet, since
  pods hold VNet addresses) and ``network.serviceCidr`` (host traffic to a service is
  counted before kube-proxy translates it; replies from a service come back from it).
- ``private``: the rest of RFC 1918 (the hub, researchers' VPN and on-premises ranges
  reached through it), link-local 169.254.0.0/16 (Azure's instance metadata service) and
  168.63.129.16 (Azure's platform address for DNS and load balancer probes). None of it
  is the internet, and none of it is the cluster.
- ``internet``: everything else.

INPUT counts by source and OUTPUT by destination (the host's own traffic); FORWARD is
counted twice, by source (``-in``) and by destination (``-out``), because that is where
pod traffic passes. Loopback is not counted.

Reading the counters takes root and CAP_NET_ADMIN (a netlink dump of the tables). The node
does that itself: ``supercluster-traffic-counters.service`` writes ``iptables-save -c`` of the
mangle table every few seconds to one file under /run, and the exporter pod only reads that
file (non-root, no capability, one read-only directory of the host: docs/security.md, "An add-on").
"""

from __future__ import annotations

from collections.abc import Callable

from infra.boot import systemd
from infra.boot.cloudinit import CloudConfig
from infra.config.cluster_config import ClusterConfig
from infra.config.value_checks import AZURE_PLATFORM_RANGE, LINK_LOCAL_RANGE, PRIVATE_RANGES
from infra.network.addressing import AddressPlan
from infra.network.iptables import Chain, Rule, Ruleset, add_ruleset

COMMENT_PREFIX = "iptables-exporter supercluster"
RFC1918 = tuple(str(block) for block in PRIVATE_RANGES)
LINK_LOCAL = str(LINK_LOCAL_RANGE)
AZURE_PLATFORM = str(AZURE_PLATFORM_RANGE)  # Azure's DNS, DHCP and health-probe address
# Loaded before the node's Kubernetes services start, so every byte they move is counted.
BEFORE = ("kubelet.service",)
# Where the node publishes its counters for the exporter (a tmpfs: never outlives a boot).
COUNTERS_DIR = "/run/supercluster/traffic-counters"
COUNTERS_FILE = f"{COUNTERS_DIR}/mangle.save"
COUNTERS_SCRIPT_PATH = "/usr/local/sbin/supercluster-traffic-counters"
COUNTERS_UNIT = "supercluster-traffic-counters.service"
COUNTERS_INTERVAL_SECONDS = 10  # well under Prometheus's scrape interval; the exporter flags older files


def traffic_classes(plan: AddressPlan) -> dict[str, tuple[str, ...]]:
    """``{"cluster": ranges, "private": ranges}``, checked in that order; what matches neither is internet."""
    return {
        "cluster": (*(str(r) for r in plan.cluster_ranges), str(plan.service_cidr)),
        "private": (*RFC1918, LINK_LOCAL, AZURE_PLATFORM),
    }


def accounting_ruleset(plan: AddressPlan) -> Ruleset:
    classes = traffic_classes(plan)

    def chain(name: str, hook: str, direction: str) -> Chain:
        flag, loopback = ("-s", "-i") if direction == "in" else ("-d", "-o")
        rules = [Rule((loopback, "lo"), "RETURN")]
        for kind, ranges in classes.items():
            rules += [Rule((flag, cidr), "RETURN", f"{COMMENT_PREFIX} traffic={kind}-{direction}") for cidr in ranges]
        rules.append(Rule(comment=f"{COMMENT_PREFIX} traffic=internet-{direction}"))
        return Chain("mangle", name, hook, tuple(rules))

    return Ruleset(
        "traffic-accounting",
        "count internet and intra-cluster traffic apart (mangle, count only)",
        (
            chain("SUPERCLUSTER-ACCT-IN", "INPUT", "in"),
            chain("SUPERCLUSTER-ACCT-OUT", "OUTPUT", "out"),
            chain("SUPERCLUSTER-ACCT-FWD-IN", "FORWARD", "in"),
            chain("SUPERCLUSTER-ACCT-FWD-OUT", "FORWARD", "out"),
        ),
    )


def boot_steps(config: ClusterConfig, plan: AddressPlan) -> list[Callable[[CloudConfig], None]]:
    """What every node (NAT hosts included) adds before kubelet: the accounting rules, unless the
    ``trafficAccounting`` add-on is off (then nothing would export the counters)."""
    if not config.addons.traffic_accounting.enabled:
        return []
    return [lambda cloud: add_traffic_accounting(cloud, plan)]


def counters_script() -> str:
    """Dumps the mangle table's counters to ``COUNTERS_FILE`` (written aside, then renamed, so a reader
    never sees half a file); with ``INTERVAL_SECONDS`` set, again and again."""
    return (
        "\n".join(
            [
                "#!/bin/bash",
                "# Written by supercluster (infra/traffic_accounting.py): publishes the traffic-accounting counters.",
                "set -euo pipefail",
                f'file="${{COUNTERS_FILE:-{COUNTERS_FILE}}}"',
                'install -d -m 0755 "$(dirname "$file")"',
                "while :; do",
                '  iptables-save --counters --table mangle > "$file.tmp"',
                '  chmod 0644 "$file.tmp" && mv -f "$file.tmp" "$file"',
                '  [ -n "${INTERVAL_SECONDS:-}" ] || exit 0',
                '  sleep "$INTERVAL_SECONDS"',
                "done",
            ]
        )
        + "\n"
    )


def add_traffic_accounting(cloud: CloudConfig, plan: AddressPlan) -> None:
    """Every node (NAT hosts included): the rules file, its loader, and a unit that runs before kubelet;
    then the unit that publishes the counters for the exporter."""
    ruleset = accounting_ruleset(plan)
    add_ruleset(cloud, ruleset, before=BEFORE)
    cloud.add(COUNTERS_SCRIPT_PATH, counters_script(), permissions="0755")
    cloud.add(
        f"/etc/systemd/system/{COUNTERS_UNIT}",
        systemd.unit(
            "supercluster: publish the traffic-accounting counters for the exporter",
            [COUNTERS_SCRIPT_PATH],
            after=[ruleset.unit],
            wants=[ruleset.unit],
            service={"Environment": f"INTERVAL_SECONDS={COUNTERS_INTERVAL_SECONDS}"},
        ),
    )
    cloud.runcmd.append(["systemctl", "enable", "--now", COUNTERS_UNIT])
