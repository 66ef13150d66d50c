"""A small model of how Azure evaluates an NSG's inbound rules, for tests that ask "who can reach this port?".

Rules are matched in priority order (lowest first) and the first match decides; after the
custom rules come Azure's defaults: AllowVnetInBound (65000), AllowAzureLoadBalancerInBound
(65001), DenyAllInBound (65500) (learn.microsoft.com/azure/virtual-network/
network-security-groups-overview). Rules are taken as the plan records them (camelCase inputs).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Any

AZURE_LOAD_BALANCER_IP = "168.63.129.16"
DEFAULT_INBOUND_RULES = (
    {
        "name": "AllowVnetInBound",
        "priority": 65000,
        "access": "Allow",
        "protocol": "*",
        "direction": "Inbound",
        "sourceAddressPrefix": "VirtualNetwork",
        "destinationAddressPrefix": "VirtualNetwork",
        "destinationPortRange": "*",
    },
    {
        "name": "AllowAzureLoadBalancerInBound",
        "priority": 65001,
        "access": "Allow",
        "protocol": "*",
        "direction": "Inbound",
        "sourceAddressPrefix": "AzureLoadBalancer",
        "destinationAddressPrefix": "*",
        "destinationPortRange": "*",
    },
    {
        "name": "DenyAllInBound",
        "priority": 65500,
        "access": "Deny",
        "protocol": "*",
        "direction": "Inbound",
        "sourceAddressPrefix": "*",
        "destinationAddressPrefix": "*",
        "destinationPortRange": "*",
    },
)


def _prefixes(rule: dict[str, Any], side: str) -> list[str]:
    single = rule.get(f"{side}AddressPrefix")
    return [single] if single is not None else list(rule.get(f"{side}AddressPrefixes") or [])


def _ports(rule: dict[str, Any]) -> list[str]:
    single = rule.get("destinationPortRange")
    return [single] if single is not None else list(rule.get("destinationPortRanges") or [])


def port_in(port: int, ranges: Sequence[str]) -> bool:
    for spec in ranges:
        if spec == "*":
            return True
        low, _, high = spec.partition("-")
        if int(low) <= port <= int(high or low):
            return True
    return False


def _address_in(address: str, prefixes: Sequence[str], virtual_network: Sequence[str]) -> bool:
    ip = ipaddress.ip_address(address)
    in_vnet = any(ip in ipaddress.ip_network(r) for r in virtual_network)
    for prefix in prefixes:
        if prefix == "*":
            return True
        if prefix == "VirtualNetwork" and in_vnet:
            return True
        if prefix == "AzureLoadBalancer" and address == AZURE_LOAD_BALANCER_IP:
            return True
        if prefix == "Internet" and not in_vnet and address != AZURE_LOAD_BALANCER_IP:
            return True
        if prefix[0].isdigit() and ip in ipaddress.ip_network(prefix):
            return True
    return False


def decide(
    rules: Sequence[dict[str, Any]],
    *,
    source: str,
    destination: str,
    port: int,
    protocol: str = "Tcp",
    virtual_network: Sequence[str],
) -> str:
    """The name of the rule that decides an inbound packet, prefixed with its access: ``Allow:rule``."""
    inbound = [r for r in [*rules, *DEFAULT_INBOUND_RULES] if r.get("direction", "Inbound") == "Inbound"]
    for rule in sorted(inbound, key=lambda r: r["priority"]):
        if rule["protocol"] not in ("*", protocol):
            continue
        if not _address_in(source, _prefixes(rule, "source"), virtual_network):
            continue
        if not _address_in(destination, _prefixes(rule, "destination"), virtual_network):
            continue
        if not port_in(port, _ports(rule)):
            continue
        return f"{rule['access']}:{rule['name']}"
    raise AssertionError("DenyAllInBound always matches")


def allows(rules: Sequence[dict[str, Any]], **packet: Any) -> bool:
    return decide(rules, **packet).startswith("Allow:")
