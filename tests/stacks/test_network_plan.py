"""The network both real stacks declare: who can reach what, egress, peerings, the hub route.

dev creates its hub (network.hub.addressSpace); prod peers to another team's hub
(network.hub.stack), answered in the plan by the example outputs of ``infra/network/hub.py``.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import pytest

from infra.config.cluster_config import ClusterConfig
from infra.control_plane import controller_manager, scheduler, token_minting
from infra.etcd.spec import METRICS_PORT
from infra.network.addressing import AddressPlan, plan_addresses
from infra.network.hub import example_hub_outputs
from infra.network.security_groups import monitoring_pools
from plan.runner import ProgramRun
from tests.conftest import plan_stack
from tests.helpers import cluster_subnets, parsed
from tests.network_model import allows, decide, port_in

NSG = "azure-native:network:NetworkSecurityGroup"
PEERING = "azure-native:network:VirtualNetworkPeering"
INTERNET_IP = "203.0.113.7"
LB_PROBE_IP = "168.63.129.16"


@dataclass
class StackNetwork:
    run: ProgramRun
    config: ClusterConfig
    plan: AddressPlan
    hub_prefixes: list[str]

    def rules(self, group: str) -> list[dict]:
        return self.run.named(f"{self.config.cluster_name}-{group}-nsg", NSG).inputs["securityRules"]

    @property
    def virtual_network(self) -> list[str]:
        """What Azure's VirtualNetwork tag covers: every cluster VNet and the peered hub."""
        return [str(v.address_space) for v in self.plan.vnets] + self.hub_prefixes

    def reaches(self, group: str, source: str, port: int, destination: str | None = None, protocol="Tcp") -> bool:
        subnet = self.plan.subnet(group if group != "nodes" else self.plan.vnets[1].subnets[0].key)
        return allows(
            self.rules(group),
            source=source,
            destination=destination or subnet.host(0),
            port=port,
            protocol=protocol,
            virtual_network=self.virtual_network,
        )

    @property
    def peers(self) -> dict[str, str]:
        """A machine of each kind that could knock on a port."""
        plan, node_subnet = self.plan, self.plan.vnets[-1].subnets[0]
        return {
            "apiserver": plan.apiserver_ips(1)[0],
            "etcd": plan.etcd_ips("etcd", 3)[2],
            "events-etcd": plan.etcd_ips("events-etcd", 3)[2],
            "nat host": plan.nat_host_ips(1)[0],
            "node or pod": node_subnet.host(7),
            "hub": str(ipaddress.ip_network(self.hub_prefixes[0])[9]),
            "internet": INTERNET_IP,
        }


@pytest.fixture(params=["dev", "prod"])
def stack(request, dev_plan, prod_plan) -> StackNetwork:
    run = {"dev": dev_plan, "prod": prod_plan}[request.param]
    config = parsed(request.param)
    if config.network.hub.address_space is not None:
        hub = [str(config.network.hub.address_space)]
    else:
        hub = example_hub_outputs(str(config.network.address_space), str(config.network.service_cidr))["addressSpace"]
    return StackNetwork(run, config, plan_addresses(config), hub)


def _who(stack: StackNetwork, group: str, port: int) -> set[str]:
    return {name for name, ip in stack.peers.items() if stack.reaches(group, ip, port)}


def test_etcd_is_reachable_only_from_the_apiservers_and_its_peers(stack):
    assert _who(stack, "etcd", 2379) == {"apiserver", "etcd"}
    assert _who(stack, "etcd", 2380) == {"etcd"}
    assert _who(stack, "events-etcd", 2379) == {"apiserver", "events-etcd"}
    assert _who(stack, "events-etcd", 2380) == {"events-etcd"}


def test_etcd_metrics_are_reachable_only_from_the_monitoring_pools(stack):
    """etcd's 2381 is plain HTTP without client certificates: only Prometheus's pools (``MONITORING_ROLE``,
    its nodeSelector) reach it; not other pools' pods, the apiservers, the hub or another etcd."""
    monitoring = monitoring_pools(stack.config)
    assert monitoring
    for vnet in stack.plan.vnets:
        if vnet.pool is None:
            continue
        for subnet in vnet.subnets:
            for group in ("etcd", "events-etcd"):
                assert stack.reaches(group, subnet.host(7), METRICS_PORT) is (vnet.pool in monitoring), (
                    group,
                    subnet.key,
                )
    for group in ("etcd", "events-etcd"):
        assert not {
            name for name, ip in stack.peers.items() if stack.reaches(group, ip, METRICS_PORT) and name != "node or pod"
        }, group


@pytest.mark.parametrize(
    "port", [controller_manager.SECURE_PORT, scheduler.SECURE_PORT, token_minting.minter_metrics()["port"]]
)
def test_control_plane_metrics_are_reachable_only_from_the_monitoring_pools(stack, port):
    """Both serve on the apiserver VM's own address (CIS 1.3.7/1.4.2 deviation): only Prometheus's
    pools reach the port; not other pools' pods, the other apiservers, etcd, the NAT hosts or the hub."""
    monitoring = monitoring_pools(stack.config)
    apiserver = stack.plan.apiserver_ips(1)[0]
    for vnet in stack.plan.vnets:
        for subnet in vnet.subnets if vnet.pool is not None else ():
            assert stack.reaches("apiserver", subnet.host(7), port, destination=apiserver) is (
                vnet.pool in monitoring
            ), subnet.key
    assert not {
        name
        for name, ip in stack.peers.items()
        if stack.reaches("apiserver", ip, port, destination=apiserver) and name != "node or pod"
    }


def test_apiservers_are_reachable_only_from_the_hub_and_the_cluster(stack):
    assert _who(stack, "apiserver", 6443) == {"apiserver", "etcd", "events-etcd", "nat host", "node or pod", "hub"}
    assert stack.reaches("apiserver", LB_PROBE_IP, 6443), "the load balancer's /readyz probe"


def test_ssh_only_from_the_hub_except_mpi_between_pods(stack):
    for group in ("etcd", "events-etcd", "apiserver", "nat", "endpoints"):
        assert _who(stack, group, 22) == {"hub"}, group
    assert _who(stack, "nodes", 22) == {"hub", "apiserver", "etcd", "events-etcd", "nat host", "node or pod"}


def test_nothing_from_the_internet_gets_in(stack):
    for group in ("etcd", "events-etcd", "apiserver", "nat", "endpoints", "nodes"):
        for port in (22, 443, 2379, 6443, 10250, 30000):
            verdict = decide(
                stack.rules(group),
                source=INTERNET_IP,
                destination=stack.plan.subnet("nat").host(3),
                port=port,
                virtual_network=stack.virtual_network,
            )
            assert verdict.startswith("Deny:"), (group, port, verdict)


def test_the_hub_reaches_the_service_range_through_the_nat_subnet_only(stack):
    service_ip = stack.plan.dns_service_ip
    for protocol, port in (("Tcp", 443), ("Udp", 53), ("Tcp", 8888)):
        assert stack.reaches("nat", stack.peers["hub"], port, destination=service_ip, protocol=protocol)
        assert not stack.reaches("nat", INTERNET_IP, port, destination=service_ip, protocol=protocol)
    # The kubelet on a NAT host is a node like any other.
    assert stack.reaches("nat", stack.peers["apiserver"], 10250)


def test_nothing_else_opens_the_apiserver_or_etcd_ports(stack):  # the metrics ports included
    opening = set()
    for nsg in stack.run.of_type(NSG):
        for rule in nsg.inputs["securityRules"]:
            ports = (
                [rule.get("destinationPortRange")]
                if rule.get("destinationPortRange")
                else rule.get("destinationPortRanges", [])
            )
            watched = (
                6443,
                2379,
                2380,
                METRICS_PORT,
                controller_manager.SECURE_PORT,
                scheduler.SECURE_PORT,
                token_minting.minter_metrics()["port"],
            )
            if rule["access"] == "Allow" and any(port_in(p, ports) for p in watched):
                opening.add((nsg.name.removeprefix(f"{stack.config.cluster_name}-"), rule["name"]))
    assert opening == {
        ("etcd-nsg", "allow-etcd-client-from-apiservers"),
        ("etcd-nsg", "allow-etcd-from-peers"),
        ("events-etcd-nsg", "allow-etcd-client-from-apiservers"),
        ("events-etcd-nsg", "allow-etcd-from-peers"),
        ("etcd-nsg", "allow-etcd-metrics-from-monitoring"),
        ("events-etcd-nsg", "allow-etcd-metrics-from-monitoring"),
        ("apiserver-nsg", "allow-apiserver-from-hub"),
        ("apiserver-nsg", "allow-apiserver-from-cluster"),
        ("apiserver-nsg", "allow-apiserver-probe"),
        ("apiserver-nsg", "allow-control-plane-metrics-from-monitoring"),
        ("nat-nsg", "allow-services-from-hub"),  # only towards the service range, never a machine's address
    }
    services = [r for r in stack.rules("nat") if r["name"] == "allow-services-from-hub"][0]
    assert services["destinationAddressPrefix"] == str(stack.config.network.service_cidr)


def test_every_subnet_has_its_nsg_and_leaves_only_through_its_nat_gateway(stack):
    name = stack.config.cluster_name
    subnets = {key: inputs for key, (_, inputs) in cluster_subnets(stack.run).items()}
    assert set(subnets) == {s.key for v in stack.plan.vnets for s in v.subnets}
    for key, inputs in subnets.items():
        group = key if key in ("etcd", "events-etcd", "apiserver", "nat", "endpoints") else "nodes"
        assert inputs["networkSecurityGroup"]["id"].endswith(f"/{name}-{group}-nsg"), key
        assert inputs["defaultOutboundAccess"] is False, key
        vnet = stack.plan.subnet(key).vnet
        if key == "endpoints":
            assert "natGateway" not in inputs
        else:
            assert inputs["natGateway"]["id"].endswith(f"/{name}-{vnet}-natgw"), key
    prefixes = {r.name: r for r in stack.run.of_type("azure-native:network:PublicIPPrefix")}
    assert {n: p.inputs["prefixLength"] for n, p in prefixes.items()} == {
        f"{name}-{v.key}-egress": 31 if v.key == "system" else 28 for v in stack.plan.vnets
    }
    assert all(p.options["protect"] for p in prefixes.values())


def test_clusters_are_peered_to_each_other_and_to_the_hub_and_nothing_else(stack):
    vnet_ids = {
        r.id
        for r in stack.run.of_type("azure-native:network:VirtualNetwork")
        if r.inputs["virtualNetworkName"] != f"{stack.config.cluster_name}-hub-vnet"
    }
    hub_vnet = [
        r
        for r in stack.run.of_type("azure-native:network:VirtualNetwork")
        if r.inputs["virtualNetworkName"] == f"{stack.config.cluster_name}-hub-vnet"
    ]
    hub_id = (
        hub_vnet[0].id
        if hub_vnet
        else example_hub_outputs(str(stack.config.network.address_space), str(stack.config.network.service_cidr))[
            "vnetId"
        ]
    )
    count = len(stack.plan.vnets)
    peerings = stack.run.of_type(PEERING)
    assert len(peerings) == count * (count - 1) + 2 * count
    for peering in peerings:
        remote = peering.inputs["remoteVirtualNetwork"]["id"]
        assert remote in vnet_ids or remote == hub_id, peering.name
        if remote == hub_id:  # ours -> hub: nothing the hub forwards from another spoke gets in
            assert peering.inputs["allowForwardedTraffic"] is False, peering.name
        assert peering.options["protect"], peering.name


def test_the_hub_routes_the_service_range_to_the_nat_hosts(stack):
    route = stack.run.named(f"{stack.config.cluster_name}-hub-peerings-services")
    assert route.inputs["addressPrefix"] == str(stack.config.network.service_cidr)
    assert route.inputs["nextHopType"] == "VirtualAppliance"
    assert route.inputs["nextHopIpAddress"] == stack.plan.nat_lb_ip()
    lb = stack.run.named(f"{stack.config.cluster_name}-nat-hosts-lb")
    assert lb.inputs["frontendIPConfigurations"][0]["privateIPAddress"] == stack.plan.nat_lb_ip()


@pytest.mark.slow  # a sequence of whole-program runs (seconds)
def test_network_resources_grow_with_scale_sets_never_with_nodes(prod_plan):
    small = plan_stack("prod", "nodePools[0].maxNodes=100", "nodePools[1].maxNodes=100")  # 1 scale set each

    def network_counts(run: ProgramRun) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in run.registrations:
            if r.type.startswith("azure-native:network:"):
                counts[r.type] = counts.get(r.type, 0) + 1
        return counts

    big_counts, small_counts = network_counts(prod_plan), network_counts(small)
    assert big_counts == small_counts  # shard subnets are inline in their VNet
    assert len(cluster_subnets(prod_plan)) - len(cluster_subnets(small)) == 2 * 29  # one per extra scale set


# Ports a machine of the cluster may answer on, beyond 22 and 6443: kubelet, the exporters, etcd's
# root backup-metrics server, pods' own ports (issue 27: the hub reached all of them).
HUB_PROBED_PORTS = (80, 443, 2379, 2381, 8080, 9100, 9479, 10250, 10256, 30000)


@pytest.mark.parametrize("group", ["apiserver", "etcd", "events-etcd", "nat", "endpoints", "nodes"])
def test_the_hub_reaches_only_6443_ssh_and_the_service_range(stack, group):
    """What docs/network.md lets the hub reach: the apiservers on 6443, SSH (key only) for break-glass, and
    the service range through the NAT hosts. Nothing else of any subnet, on any protocol."""
    hub = stack.peers["hub"]
    for port in HUB_PROBED_PORTS:
        for protocol in ("Tcp", "Udp"):
            assert not stack.reaches(group, hub, port, protocol=protocol), (group, port, protocol)
    assert stack.reaches(group, hub, 22)
    assert stack.reaches("apiserver", hub, 6443)
