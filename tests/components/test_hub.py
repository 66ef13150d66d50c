"""Hub-and-spoke under mocks, both ways: a hub created here, and another team's hub read by StackReference."""

from __future__ import annotations

import pytest

from components.hub import Hub, HubPeerings
from infra.config.cluster_config import ClusterConfig
from infra.config.errors import ConfigError
from infra.network.addressing import plan_addresses
from plan.runner import ProgramRun, run_declarations
from tests.helpers import parsed

PEERING = "azure-native:network:VirtualNetworkPeering"
HUB_STACK = "organization/research-hub/prod"
OTHER_SUBSCRIPTION = "33333333-3333-3333-3333-333333333333"
OUR_VNETS = {"system": "/ours/system-vnet", "h100a": "/ours/h100a-vnet"}


def team_hub(**changes) -> dict:
    outputs = {
        "vnetId": f"/subscriptions/{OTHER_SUBSCRIPTION}/resourceGroups/connectivity-rg"
        "/providers/Microsoft.Network/virtualNetworks/hub-eastus",
        "resourceGroupName": "connectivity-rg",
        "vnetName": "hub-eastus",
        "addressSpace": ["192.168.0.0/20", "100.64.0.0/16"],
        "routeTableName": "researchers-rt",
    }
    outputs.update(changes)
    return outputs


def declare_hub(config: ClusterConfig, stack_outputs: dict | None = None) -> ProgramRun:
    plan = plan_addresses(config)

    def declare():
        hub = Hub(
            "c-hub", cluster_name="c", network=config.network, plan=plan, resource_group_name="c-rg", location="eastus"
        )
        HubPeerings(
            "c-hub-peerings",
            hub=hub,
            cluster_name="c",
            plan=plan,
            vnet_ids=OUR_VNETS,
            vnet_names={key: f"c-{key}-vnet" for key in OUR_VNETS},
            resource_group_name="c-rg",
        )

    return run_declarations(declare, stack_outputs=stack_outputs)


def test_a_hub_created_here_has_a_researchers_subnet_routed_to_the_nat_hosts():
    config = parsed("dev")
    run = declare_hub(config)
    vnet = run.named("c-hub-vnet")
    assert vnet.inputs["addressSpace"]["addressPrefixes"] == ["10.250.0.0/22"]
    assert vnet.options["protect"]
    subnet = run.named("c-hub-researchers")
    assert subnet.inputs["addressPrefix"] == "10.250.0.0/23"
    assert subnet.inputs["routeTable"]["id"].endswith("/routeTables/c-hub-rt")
    assert run.named("c-hub-routes").options["ignoreChanges"] == ["routes"]
    route = run.named("c-hub-peerings-services")
    assert route.inputs == {
        "routeName": "c-services",
        "routeTableName": "c-hub-rt",
        "resourceGroupName": "c-rg",
        "addressPrefix": "172.20.0.0/20",
        "nextHopType": "VirtualAppliance",
        "nextHopIpAddress": plan_addresses(config).nat_lb_ip(),
    }
    assert not run.of_type("pulumi:providers:azure-native"), "our own hub needs no other provider"


@pytest.mark.parametrize("mode", ["created", "referenced"])
def test_every_cluster_vnet_is_peered_with_the_hub_both_ways_and_with_nothing_else(mode):
    run = declare_hub(parsed("dev")) if mode == "created" else declare_hub(parsed("prod"), {HUB_STACK: team_hub()})
    hub_id = run.named("c-hub-vnet").id if mode == "created" else team_hub()["vnetId"]
    hub_name = "c-hub-vnet" if mode == "created" else "hub-eastus"
    peerings = {p.name: p.inputs for p in run.of_type(PEERING)}
    assert set(peerings) == {
        f"c-hub-peerings-{side}" for key in OUR_VNETS for side in (f"{key}-to-hub", f"hub-to-{key}")
    }
    for key, vnet_id in OUR_VNETS.items():
        ours, theirs = peerings[f"c-hub-peerings-{key}-to-hub"], peerings[f"c-hub-peerings-hub-to-{key}"]
        assert (ours["virtualNetworkName"], ours["remoteVirtualNetwork"]["id"]) == (f"c-{key}-vnet", hub_id)
        assert (theirs["virtualNetworkName"], theirs["remoteVirtualNetwork"]["id"]) == (hub_name, vnet_id)
        assert theirs["virtualNetworkPeeringName"] == f"c-{key}"  # unique among the hub's many clusters
        # Our side refuses what the hub forwards from other spokes; the hub side accepts the NAT hosts'
        # replies, whose source is a service IP.
        assert ours["allowForwardedTraffic"] is False and theirs["allowForwardedTraffic"] is True
    assert all(p.options["protect"] for p in run.of_type(PEERING))


def test_another_teams_hub_is_read_by_stack_reference_and_changed_only_through_its_subscription():
    run = declare_hub(parsed("prod"), {HUB_STACK: team_hub()})
    provider = run.named("c-hub-provider")
    assert provider.inputs["subscriptionId"] == OTHER_SUBSCRIPTION
    in_hub = [r for r in run.registrations if r.provider]
    assert {r.name for r in in_hub} == {
        "c-hub-peerings-services",
        "c-hub-peerings-hub-to-system",
        "c-hub-peerings-hub-to-h100a",
    }
    assert all(r.provider.startswith(provider.urn) for r in in_hub)
    route = run.named("c-hub-peerings-services").inputs
    assert (route["resourceGroupName"], route["routeTableName"]) == ("connectivity-rg", "researchers-rt")
    assert not run.of_type("azure-native:network:VirtualNetwork"), "someone else's hub is never created here"


def test_a_hub_with_a_gateway_is_used_by_the_spokes_once_it_allows_transit():
    run = declare_hub(parsed("prod"), {HUB_STACK: team_hub(gatewayTransit=True)})
    ours, theirs = run.named("c-hub-peerings-system-to-hub"), run.named("c-hub-peerings-hub-to-system")
    assert ours.inputs["useRemoteGateways"] is True and theirs.inputs["allowGatewayTransit"] is True
    assert theirs.urn in ours.options["dependsOn"]


@pytest.mark.parametrize(
    "outputs,problem",
    [
        ({"vnetId": team_hub()["vnetId"]}, "it has no resourceGroupName, vnetName, addressSpace, routeTableName"),
        (team_hub(addressSpace=["10.1.0.0/16"]), "overlaps network.addressSpace 10.0.0.0/8"),
        (team_hub(addressSpace="172.20.0.0/24"), "overlaps network.serviceCidr 172.20.0.0/16"),
        (team_hub(vnetName="other"), "vnetId names connectivity-rg/hub-eastus, not connectivity-rg/other"),
        (team_hub(vnetId="hub-eastus"), "is not a virtual network's ARM id"),
        ({}, "it has no vnetId"),
    ],
)
def test_a_hub_stack_that_breaks_the_contract_stops_the_program_with_one_line(outputs, problem):
    with pytest.raises(ConfigError) as caught:
        declare_hub(parsed("prod"), {HUB_STACK: outputs})
    assert caught.value.key == "network.hub.stack" and caught.value.value == HUB_STACK
    assert problem in caught.value.accepted
