"""The hub side of the box: a researcher's host in the hub's subnet, and the NAT hosts' load balancer
that the hub's route sends the service range to (docs/cluster-in-a-box.md, "Researcher access").

All of it is read from the plan: the hub's route (``serviceCidr`` to the NAT load balancer's frontend,
components/hub.py), the subnet whose route table holds it (the researcher's host takes its first
address Azure hands out), the hub VNet's prefixes (VNet peering gives every cluster machine a route
to them, and the hub one to the cluster's address space), and the NAT load balancer's frontend,
probe and backend pool (components/nat_hosts.py). The load balancer is ``load_balancer.py
--ha-ports``: a router sending every flow to a NAT host whose kube-proxy health probe passes.
"""

from __future__ import annotations

import ipaddress
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.e2e.cluster import Cluster
from tests.e2e.hosts import Host, Process, wait_for
from tests.e2e.plan_machines import AZURE_RESERVED_FIRST, NIC, VNET, Plan

ROUTE = "azure-native:network:Route"
SUBNET = "azure-native:network:Subnet"
NAT_LOAD_BALANCER = "nat-hosts-lb"  # the plan's resource name ends so (components/nat_hosts.py)


@dataclass(frozen=True)
class HubSide:
    researcher: Host
    load_balancer: Process
    frontend: str  # the NAT load balancer's address, the hub route's next hop
    nat_hosts: tuple[str, ...]  # the addresses in its backend pool


def _one(items: list[dict[str, Any]], what: str) -> dict[str, Any]:
    assert len(items) == 1, f"the plan has {len(items)} {what}, the box expects one"
    return items[0]


def _hub_route(plan: Plan) -> dict[str, Any]:
    return _one([r["inputs"] for r in plan.of_type(ROUTE)], "routes")


def _researchers_subnet(plan: Plan, route_table: str) -> dict[str, Any]:
    """The subnet whose route table holds the hub's route: where researchers' traffic comes from."""
    subnets = [
        s["inputs"]
        for s in plan.of_type(SUBNET)
        if s["inputs"].get("routeTable", {}).get("id", "").endswith(f"/routeTables/{route_table}")
    ]
    return _one(subnets, f"subnets on route table {route_table}")


def _vnet_prefixes(plan: Plan, vnet_name: str) -> list[str]:
    vnet = _one([v["inputs"] for v in plan.of_type(VNET) if v["inputs"]["virtualNetworkName"] == vnet_name], vnet_name)
    return list(vnet["addressSpace"]["addressPrefixes"])


def _pool_addresses(plan: Plan, load_balancer: dict[str, Any]) -> tuple[str, ...]:
    """The primary addresses of the NICs in the load balancer's backend pool."""
    pool = f"/loadBalancers/{load_balancer['loadBalancerName']}/backendAddressPools/"
    pool += load_balancer["backendAddressPools"][0]["name"]
    return tuple(
        config["privateIPAddress"]
        for nic in plan.of_type(NIC)
        for config in nic["inputs"]["ipConfigurations"]
        if any(p["id"].endswith(pool) for p in config.get("loadBalancerBackendAddressPools", []))
    )


def start_hub_side(cluster: Cluster) -> HubSide:
    """Peering routes on the cluster's real nodes, the NAT hosts' load balancer, and a researcher's host."""
    plan, network = cluster.plan, cluster.network
    address_space = cluster.spec.config.network.address_space
    route = _hub_route(plan)
    subnet = _researchers_subnet(plan, route["routeTableName"])
    hub_prefixes = _vnet_prefixes(plan, subnet["virtualNetworkName"])
    peering = [["ip", "route", "add", prefix, "dev", "eth0"] for prefix in hub_prefixes]
    for node in cluster.real_nodes:
        for command in peering:
            network.run(node.host, command)
    lb = plan.load_balancer(NAT_LOAD_BALANCER)
    frontend = lb["frontendIPConfigurations"][0]["privateIPAddress"]
    probe = lb["probes"][0]
    backends = _pool_addresses(plan, lb)
    lb_host = network.add_host("nat-load-balancer", [f"{frontend}/{address_space.prefixlen}"])
    for command in peering:
        network.run(lb_host, command)
    process = network.start(
        lb_host,
        "nat-load-balancer",
        [
            sys.executable,
            str(Path(__file__).with_name("load_balancer.py")),
            "--ha-ports",
            probe["protocol"],
            probe["requestPath"],
            str(probe["intervalInSeconds"]),
            str(probe["probeThreshold"]),
            *[f"{ip}:{probe['port']}" for ip in backends],
        ],
    )
    prefix = ipaddress.ip_network(subnet["addressPrefix"])
    researcher_ip = prefix.network_address + AZURE_RESERVED_FIRST
    researcher = network.add_host("researcher", [f"{researcher_ip}/{prefix.prefixlen}"])
    network.run(researcher, ["ip", "route", "add", str(address_space), "dev", "eth0"])  # peering
    network.run(researcher, ["ip", "route", "add", route["addressPrefix"], "via", route["nextHopIpAddress"]])
    hub = HubSide(researcher, process, frontend, backends)
    wait_for(
        f"the NAT load balancer to take in {', '.join(backends)}",
        lambda: healthy_backends(hub) == set(backends),
        timeout=60,
        on_timeout=cluster.describe,
    )
    return hub


def healthy_backends(hub: HubSide) -> set[str]:
    """The backends the load balancer sends flows to, from its logged state changes."""
    state: dict[str, bool] = {}
    for line in hub.load_balancer.output().splitlines():
        if line.startswith("{"):
            change = json.loads(line)
            state[change["backend"].rsplit(":", 1)[0]] = change["healthy"]
    return {backend for backend, up in state.items() if up}
