"""Hub-and-spoke: the hub researchers connect to, and the peerings and route that make the cluster
reachable from it (and only from it).

``Hub`` either creates the hub (``network.hub.addressSpace``: VNet, researchers' subnet,
route table) or reads another team's hub through a StackReference (``network.hub.stack``,
checked against the contract in ``infra/network/hub.py``). ``HubPeerings`` then peers every cluster
VNet with the hub in both directions and adds the route that sends ``serviceCidr`` to the
NAT hosts' load balancer. Clusters are peered to the hub only; peering is not transitive,
and our side refuses traffic the hub forwards from elsewhere, so no cluster reaches another.
"""

from __future__ import annotations

from collections.abc import Mapping

import pulumi

from components import declare
from components.stack_config import ConfigRunError
from infra.config import naming
from infra.config.cluster_config import NetworkConfig
from infra.config.errors import ConfigError
from infra.network.addressing import HUB_SUBNETS, HUB_VNET, AddressPlan
from infra.network.hub import HubOutputs, parse_hub_outputs


class HubContractError(ConfigRunError):
    """A hub stack whose outputs break the contract."""


def _checked(outputs: dict, network: NetworkConfig) -> HubOutputs:
    try:
        return parse_hub_outputs(outputs, network)
    except ConfigError as error:
        raise HubContractError(error) from None


class Hub(pulumi.ComponentResource):
    """What the cluster needs from the hub, however the hub came to exist (the hub contract as Outputs)."""

    vnet_id: pulumi.Output[str]
    vnet_name: pulumi.Output[str]
    resource_group_name: pulumi.Output[str]
    address_prefixes: pulumi.Output[list[str]]
    route_table_name: pulumi.Output[str]
    gateway_transit: pulumi.Output[bool]
    # For resources inside the hub: None (the default provider) when the hub is ours, else a provider
    # for the hub's subscription.
    provider: pulumi.ProviderResource | None

    def __init__(
        self,
        name: str,
        *,
        cluster_name: str,
        network: NetworkConfig,
        plan: AddressPlan,
        resource_group_name: pulumi.Input[str],
        location: str,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("supercluster:hub:Hub", name, None, opts)
        if network.hub.stack is not None:
            self._read(name, network)
        else:
            self._create(name, cluster_name, plan, resource_group_name, location)
        self.register_outputs({"contract": self.contract})

    @property
    def contract(self) -> pulumi.Output[dict]:
        return pulumi.Output.all(
            self.vnet_id,
            self.resource_group_name,
            self.vnet_name,
            self.address_prefixes,
            self.route_table_name,
            self.gateway_transit,
        ).apply(
            lambda v: {
                "vnetId": v[0],
                "resourceGroupName": v[1],
                "vnetName": v[2],
                "addressSpace": v[3],
                "routeTableName": v[4],
                "gatewayTransit": v[5],
            }
        )

    def _read(self, name: str, network: NetworkConfig) -> None:
        reference = pulumi.StackReference(
            f"{name}-stack", stack_name=network.hub.stack, opts=pulumi.ResourceOptions(parent=self)
        )
        hub: pulumi.Output[HubOutputs] = reference.outputs.apply(lambda outputs: _checked(outputs, network))
        self.vnet_id = hub.apply(lambda h: h.vnet_id)
        self.vnet_name = hub.apply(lambda h: h.vnet_name)
        self.resource_group_name = hub.apply(lambda h: h.resource_group_name)
        self.address_prefixes = hub.apply(lambda h: list(h.address_space))
        self.route_table_name = hub.apply(lambda h: h.route_table_name)
        self.gateway_transit = hub.apply(lambda h: h.gateway_transit)
        # The hub may live in another subscription (a landing zone's connectivity subscription).
        # This provider authenticates like the default one, from the environment (az login,
        # ARM_* variables, OIDC), and needs Network Contributor on the hub's resource group.
        self.provider = declare.provider(
            "azure-native",
            f"{name}-provider",
            {"subscriptionId": hub.apply(lambda h: h.subscription_id), "environment": "public"},
            pulumi.ResourceOptions(parent=self),
        )

    def _create(
        self, name: str, cluster_name: str, plan: AddressPlan, resource_group_name: pulumi.Input[str], location: str
    ) -> None:
        hub_plan = plan.hub
        assert hub_plan is not None, "network.hub.addressSpace is set, so the plan has a hub"
        vnet = declare.azure(
            "network:VirtualNetwork",
            f"{name}-vnet",
            {
                "virtualNetworkName": naming.vnet(cluster_name, HUB_VNET),
                "resourceGroupName": resource_group_name,
                "location": location,
                "addressSpace": {"addressPrefixes": [str(hub_plan.address_space)]},
                # No DDoS plan (nothing in the hub is public); Azure's defaults, stated.
                "enableDdosProtection": False,
                "enableVmProtection": False,
            },
            pulumi.ResourceOptions(parent=self, protect=True, ignore_changes=["subnets"]),
            outputs=["name"],
        )
        routes = declare.azure(
            "network:RouteTable",
            f"{name}-routes",
            {
                "routeTableName": naming.route_table(cluster_name, HUB_VNET),
                "resourceGroupName": resource_group_name,
                "location": location,
            },
            # Routes are separate resources (HubPeerings adds each cluster's service route).
            pulumi.ResourceOptions(parent=self, ignore_changes=["routes"]),
            outputs=["name"],
        )
        researchers = plan.subnet(HUB_SUBNETS[0])
        declare.azure(
            "network:Subnet",
            f"{name}-{researchers.key}",
            {
                "subnetName": researchers.key,
                "virtualNetworkName": vnet.output("name"),
                "resourceGroupName": resource_group_name,
                "addressPrefix": str(researchers.cidr),
                "routeTable": {"id": routes.id},
                # Azure's defaults, stated.
                "privateEndpointNetworkPolicies": "Disabled",
                "privateLinkServiceNetworkPolicies": "Enabled",
            },
            pulumi.ResourceOptions(parent=vnet),
        )
        self.vnet_id = vnet.id
        self.vnet_name = vnet.output("name")
        self.resource_group_name = pulumi.Output.from_input(resource_group_name)
        self.address_prefixes = pulumi.Output.from_input([str(hub_plan.address_space)])
        self.route_table_name = routes.output("name")
        self.gateway_transit = pulumi.Output.from_input(False)
        self.provider = None


class HubPeerings(pulumi.ComponentResource):
    """Both directions of every cluster VNet's peering with the hub, and the hub's route to the NAT hosts."""

    def __init__(
        self,
        name: str,
        *,
        hub: Hub,
        cluster_name: str,
        plan: AddressPlan,
        vnet_ids: Mapping[str, pulumi.Input[str]],
        vnet_names: Mapping[str, pulumi.Input[str]],
        resource_group_name: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("supercluster:hub:HubPeerings", name, None, opts)
        in_hub = pulumi.ResourceOptions(parent=self, provider=hub.provider)
        for key in vnet_ids:
            hub_side = declare.azure(
                "network:VirtualNetworkPeering",
                f"{name}-hub-to-{key}",
                {
                    "virtualNetworkPeeringName": naming.hub_peering(cluster_name, key),
                    "virtualNetworkName": hub.vnet_name,
                    "resourceGroupName": hub.resource_group_name,
                    "remoteVirtualNetwork": {"id": vnet_ids[key]},
                    "allowVirtualNetworkAccess": True,
                    # Replies from the NAT hosts carry a service IP as source, which is not in our VNets.
                    "allowForwardedTraffic": True,
                    "allowGatewayTransit": hub.gateway_transit,
                },
                pulumi.ResourceOptions.merge(in_hub, pulumi.ResourceOptions(protect=True)),
            )
            declare.azure(
                "network:VirtualNetworkPeering",
                f"{name}-{key}-to-hub",
                {
                    "virtualNetworkPeeringName": "to-hub",
                    "virtualNetworkName": vnet_names[key],
                    "resourceGroupName": resource_group_name,
                    "remoteVirtualNetwork": {"id": hub.vnet_id},
                    "allowVirtualNetworkAccess": True,
                    # Only traffic that starts in the hub (or comes through its gateway) gets in; nothing
                    # the hub forwards from another spoke does.
                    "allowForwardedTraffic": False,
                    "useRemoteGateways": hub.gateway_transit,
                },
                # Azure accepts useRemoteGateways only once the hub side allows gateway transit.
                pulumi.ResourceOptions(parent=self, protect=True, depends_on=[hub_side]),
            )
        declare.azure(
            "network:Route",
            f"{name}-services",
            {
                "routeName": naming.service_route(cluster_name),
                "routeTableName": hub.route_table_name,
                "resourceGroupName": hub.resource_group_name,
                "addressPrefix": str(plan.service_cidr),
                "nextHopType": "VirtualAppliance",
                "nextHopIpAddress": plan.nat_lb_ip(),
            },
            in_hub,
        )
        self.register_outputs({})
