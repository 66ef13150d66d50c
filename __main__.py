"""supercluster: load config, build the cluster, export outputs. Nothing else lives here."""

import pulumi
import pulumi_azure_native as azure

from components import aliases
from components.hub import Hub, HubPeerings
from components.identities import RoleIdentities
from components.nat_hosts import NatHosts
from components.network import ClusterNetwork
from components.secret_store import SecretStore
from components.stack_config import load_cluster_spec
from infra import naming

aliases.register()
spec = load_cluster_spec()
config, plan = spec.config, spec.addresses
client = azure.authorization.get_client_config_output()

group = azure.resources.ResourceGroup(
    config.cluster_name,
    resource_group_name=naming.resource_group(config.cluster_name),
    location=config.location,
    opts=pulumi.ResourceOptions(protect=True),
)
hub = Hub(f"{config.cluster_name}-hub", cluster_name=config.cluster_name, network=config.network, plan=plan,
          resource_group_name=group.name, location=config.location)
network = ClusterNetwork(config.cluster_name, plan=plan, resource_group_name=group.name, location=config.location,
                         hub_prefixes=hub.address_prefixes)
HubPeerings(f"{config.cluster_name}-hub-peerings", hub=hub, cluster_name=config.cluster_name, plan=plan,
            vnet_ids=network.vnet_ids, vnet_names=network.vnet_names, resource_group_name=group.name)
identities = RoleIdentities(f"{config.cluster_name}-id", resource_group_name=group.name,
                            location=config.location)
secrets = SecretStore(
    f"{config.cluster_name}-secrets", cluster_name=config.cluster_name, resource_group_name=group.name,
    location=config.location, tenant_id=client.tenant_id, subscription_id=client.subscription_id,
    endpoint_subnet_id=network.subnet_ids["endpoints"], vnet_ids=network.vnet_ids,
)
nat_hosts = NatHosts(
    f"{config.cluster_name}-nat-hosts", config=config, plan=plan, resource_group_name=group.name,
    location=config.location, subscription_id=client.subscription_id, subnet_id=network.subnet_ids["nat"],
    identity_id=identities.identities["nat"].id, vault_name=secrets.vault_name,
)

pulumi.export("clusterName", config.cluster_name)
pulumi.export("resourceGroupName", group.name)
pulumi.export("vnetIds", network.vnet_ids)
pulumi.export("network", {
    "addressSpace": str(config.network.address_space),
    "serviceCidr": str(config.network.service_cidr),
    "natLoadBalancerIp": nat_hosts.load_balancer_ip,
    "egressPrefixes": network.egress_prefixes,
    "hub": hub.contract,
})
