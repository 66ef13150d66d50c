"""The hub contract: what a hub stack owned by another team exports, so a cluster can peer to it.

Researchers connect to the hub (VPN, ExpressRoute, jump hosts) and from there reach
every cluster; clusters are peered only to the hub, never to each other, and peering is
not transitive, so no cluster can reach another. With ``network.hub.stack`` the
cluster reads the hub stack's outputs through a StackReference and expects:

- ``vnetId`` (string): ARM id of the hub VNet; its subscription is where the hub-side
  resources (our peerings into the hub, our route) are created.
- ``resourceGroupName``, ``vnetName`` (strings): the hub VNet's group and name, matching ``vnetId``.
- ``addressSpace`` (list of CIDRs): every range researchers' traffic comes from, i.e. the hub
  VNet's prefixes plus VPN client pools or on-premises ranges routed through it.
- ``routeTableName`` (string): the route table, in ``resourceGroupName``, of the subnets
  researchers come from; the cluster adds its ``serviceCidr -> NAT hosts`` route to it.
- ``gatewayTransit`` (bool, optional): the hub has a VPN/ExpressRoute gateway that spokes use
  (``useRemoteGateways``), so replies find their way back to VPN clients.

A hub created here (``network.hub.addressSpace``) is described by the same contract.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from infra.config.cluster_config import NetworkConfig
from infra.config.errors import ConfigError

REQUIRED_OUTPUTS = ("vnetId", "resourceGroupName", "vnetName", "addressSpace", "routeTableName")
_VNET_ID = re.compile(
    r"/subscriptions/(?P<subscription>[0-9a-fA-F-]{36})/resourceGroups/(?P<group>[^/]+)"
    r"/providers/Microsoft\.Network/virtualNetworks/(?P<name>[^/]+)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class HubOutputs:
    vnet_id: str
    subscription_id: str
    resource_group_name: str
    vnet_name: str
    address_space: tuple[str, ...]
    route_table_name: str
    gateway_transit: bool = False

    def as_outputs(self) -> dict[str, Any]:
        return {
            "vnetId": self.vnet_id,
            "resourceGroupName": self.resource_group_name,
            "vnetName": self.vnet_name,
            "addressSpace": list(self.address_space),
            "routeTableName": self.route_table_name,
            "gatewayTransit": self.gateway_transit,
        }


def parse_hub_outputs(outputs: Mapping[str, Any], network: NetworkConfig) -> HubOutputs:
    """Checks another team's hub stack outputs against the contract and against our own ranges."""
    key, stack = "network.hub.stack", network.hub.stack

    def refuse(problem: str) -> ConfigError:
        return ConfigError(
            key, stack, f"a hub stack that exports the hub contract (docs/network.md, 'Hub and spoke'): {problem}"
        )

    missing = [name for name in REQUIRED_OUTPUTS if outputs.get(name) in (None, "", [])]
    if missing:
        raise refuse(f"it has no {', '.join(missing)}")
    match = _VNET_ID.fullmatch(str(outputs["vnetId"]))
    if match is None:
        raise refuse(f"vnetId {outputs['vnetId']!r} is not a virtual network's ARM id")
    if (match["group"].lower(), match["name"].lower()) != (
        str(outputs["resourceGroupName"]).lower(),
        str(outputs["vnetName"]).lower(),
    ):
        raise refuse(
            f"vnetId names {match['group']}/{match['name']}, not {outputs['resourceGroupName']}/{outputs['vnetName']}"
        )
    raw_space = outputs["addressSpace"]
    prefixes = [raw_space] if isinstance(raw_space, str) else list(raw_space)
    try:
        ranges = [ipaddress.IPv4Network(p) for p in prefixes]
    except (ValueError, TypeError):
        raise refuse(f"addressSpace {raw_space!r} is not a list of IPv4 CIDRs") from None
    for hub_range in ranges:
        for name, ours in (
            ("network.addressSpace", network.address_space),
            ("network.serviceCidr", network.service_cidr),
        ):
            if hub_range.overlaps(ours):
                raise refuse(f"its addressSpace {hub_range} overlaps {name} {ours}")
    return HubOutputs(
        vnet_id=str(outputs["vnetId"]),
        subscription_id=match["subscription"],
        resource_group_name=str(outputs["resourceGroupName"]),
        vnet_name=str(outputs["vnetName"]),
        address_space=tuple(str(r) for r in ranges),
        route_table_name=str(outputs["routeTableName"]),
        gateway_transit=bool(outputs.get("gatewayTransit", False)),
    )


# An offline plan has no hub stack to read. These stand-ins (python -m plan uses them unless
# --stack-outputs gives real ones) take the first range that overlaps none of the cluster's.
EXAMPLE_SUBSCRIPTION = "22222222-2222-2222-2222-222222222222"
_EXAMPLE_RANGES = ("192.168.0.0/22", "172.31.252.0/22", "10.255.252.0/22", "172.16.0.0/22")


def example_hub_outputs(address_space: str, service_cidr: str) -> dict[str, Any]:
    ours = [ipaddress.IPv4Network(address_space), ipaddress.IPv4Network(service_cidr)]
    free = next(r for r in _EXAMPLE_RANGES if not any(ipaddress.IPv4Network(r).overlaps(o) for o in ours))
    group, name = "example-hub-rg", "example-hub-vnet"
    return HubOutputs(
        vnet_id=(
            f"/subscriptions/{EXAMPLE_SUBSCRIPTION}/resourceGroups/{group}"
            f"/providers/Microsoft.Network/virtualNetworks/{name}"
        ),
        subscription_id=EXAMPLE_SUBSCRIPTION,
        resource_group_name=group,
        vnet_name=name,
        address_space=(free,),
        route_table_name="example-hub-researchers-rt",
        gateway_transit=False,
    ).as_outputs()
