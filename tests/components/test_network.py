"""ClusterNetwork under mocks: the plan's VNets and subnets, one NSG per role, one NAT gateway per VNet."""

from __future__ import annotations

import pulumi

from components.network import ClusterNetwork, _security_rule
from infra.config.cluster_config import parse_config
from infra.network.addressing import plan_addresses
from infra.network.security_groups import HUB, SecurityRule
from plan.runner import run_declarations
from tests.helpers import cluster_subnets, raw_config

HUB_PREFIXES = ["192.168.0.0/22", "100.64.0.0/16"]


def declare(raw: dict):
    plan = plan_addresses(parse_config(raw, "eastus"))

    def program():
        ClusterNetwork(
            "c",
            plan=plan,
            resource_group_name="c-rg",
            location="eastus",
            hub_prefixes=pulumi.Output.from_input(HUB_PREFIXES),
            monitoring_pools=(),
        )

    return plan, run_declarations(program)


def test_a_pool_spread_over_two_vnets_gets_both_meshed_with_their_own_nat_gateways():
    raw = raw_config("prod")
    raw["nodePools"] = [
        {
            "name": "big",
            "role": "cpu",
            "vmSize": "Standard_D64ds_v5",
            "minNodes": 0,
            "maxNodes": 7_000,
            "podIpsPerNode": 15,
            "addressSlot": 1,
        }
    ]
    raw["addons"] = {"clusterAutoscaler": {"enabled": False}, "monitoring": {"enabled": False}}  # no system pool
    plan, run = declare(raw)
    vnets = {r.inputs["virtualNetworkName"]: r for r in run.of_type("azure-native:network:VirtualNetwork")}
    assert set(vnets) == {"c-system-vnet", "c-big-vnet", "c-big-1-vnet"}
    assert vnets["c-big-1-vnet"].inputs["addressSpace"]["addressPrefixes"] == ["10.5.0.0/16"]
    assert len(run.of_type("azure-native:network:VirtualNetworkPeering")) == 3 * 2
    gateways = {r.name for r in run.of_type("azure-native:network:NatGateway")}
    assert gateways == {"c-system-natgw", "c-big-natgw", "c-big-1-natgw"}
    vnet, shard = cluster_subnets(run)["big-s005"]
    assert vnet.inputs["virtualNetworkName"] == "c-big-1-vnet"
    assert shard["natGateway"]["id"].endswith("/natGateways/c-big-1-natgw")
    assert shard["networkSecurityGroup"]["id"].endswith("/networkSecurityGroups/c-nodes-nsg")
    assert len(run.of_type("azure-native:network:NetworkSecurityGroup")) == 6


def test_the_hub_source_becomes_the_hubs_prefixes_and_service_tags_stay_singular():
    def program():
        pulumi.export(
            "rules",
            [
                _security_rule(
                    SecurityRule("a", 100, "Allow", "Tcp", (HUB, "10.0.0.0/8"), ("80", "443")),
                    pulumi.Output.from_input(HUB_PREFIXES),
                ),
                _security_rule(SecurityRule("b", 200, "Deny", "*", ("Internet",)), HUB_PREFIXES),
            ],
        )

    rules = run_declarations(program).outputs["rules"]
    assert rules[0]["sourceAddressPrefixes"] == [*HUB_PREFIXES, "10.0.0.0/8"]
    assert rules[0]["destinationPortRanges"] == ["80", "443"] and "destinationPortRange" not in rules[0]
    assert rules[1]["sourceAddressPrefix"] == "Internet" and "sourceAddressPrefixes" not in rules[1]
    assert rules[1]["destinationPortRange"] == "*"


def test_each_vnet_creates_its_subnets_in_one_request():
    """Inline subnets: Azure runs one subnet operation per VNet at a time, so separate Subnet resources
    created in parallel would fail (AnotherOperationInProgress); and a shard costs one resource, not two."""
    plan, run = declare(raw_config("prod"))
    assert run.of_type("azure-native:network:Subnet") == []
    subnets = cluster_subnets(run)
    for vnet_plan in plan.vnets:
        vnet = run.named(f"c-{vnet_plan.key}", "azure-native:network:VirtualNetwork")
        assert [s["name"] for s in vnet.inputs["subnets"]] == [s.key for s in vnet_plan.subnets], "in plan order"
        assert [s["addressPrefix"] for s in vnet.inputs["subnets"]] == [str(s.cidr) for s in vnet_plan.subnets]
        assert vnet.options["ignoreChanges"] == [], "the list is authoritative: no subnet is left unmanaged"
        assert vnet.options["protect"]
    endpoints = subnets["endpoints"][1]
    assert endpoints["privateEndpointNetworkPolicies"] == "Enabled" and "natGateway" not in endpoints
    assert subnets["etcd"][1]["privateEndpointNetworkPolicies"] == "Disabled"  # the SDK's default


def test_subnet_ids_are_azure_ids_under_their_vnet():
    def program():
        network = ClusterNetwork(
            "c",
            plan=plan_addresses(parse_config(raw_config("prod"), "eastus")),
            resource_group_name="c-rg",
            location="eastus",
            hub_prefixes=HUB_PREFIXES,
            monitoring_pools=(),
        )
        pulumi.export("subnetIds", network.subnet_ids)
        pulumi.export("vnetIds", network.vnet_ids)

    outputs = run_declarations(program).outputs
    assert outputs["subnetIds"]["etcd"] == outputs["vnetIds"]["system"] + "/subnets/etcd"
    assert outputs["subnetIds"]["h100a-s029"] == outputs["vnetIds"]["h100a"] + "/subnets/h100a-s029"
