"""supercluster: load config, build the cluster, export outputs. Nothing else lives here."""

import pulumi
import pulumi_azure_native as azure

from components import aliases
from components.etcd_backups import EtcdBackupStore
from components.etcd_cluster import EtcdCluster
from components.etcd_pki import EtcdPki
from components.identities import RoleIdentities
from components.network import ClusterNetwork
from components.secret_store import SecretStore
from components.stack_config import load_cluster_spec
from infra import naming
from infra.etcd.spec import EVENTS, MAIN, etcd_cluster_spec

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
network = ClusterNetwork(config.cluster_name, plan=plan, resource_group_name=group.name, location=config.location)
identities = RoleIdentities(f"{config.cluster_name}-id", resource_group_name=group.name,
                            location=config.location)
secrets = SecretStore(
    f"{config.cluster_name}-secrets", cluster_name=config.cluster_name, resource_group_name=group.name,
    location=config.location, tenant_id=client.tenant_id, subscription_id=client.subscription_id,
    endpoint_subnet_id=network.subnet_ids["endpoints"], vnet_ids=network.vnet_ids,
)

etcd_pki = EtcdPki(
    f"{config.cluster_name}-etcd-pki", cluster_name=config.cluster_name, secrets=secrets,
    ca_readers={role: identities.principal_id(role) for role in (MAIN, EVENTS, "apiserver")},
    apiserver_principal_id=identities.principal_id("apiserver"),
)
etcd_backups = EtcdBackupStore(
    f"{config.cluster_name}-etcd-backup-store", cluster_name=config.cluster_name, resource_group_name=group.name,
    location=config.location, subscription_id=client.subscription_id,
    endpoint_subnet_id=network.subnet_ids["endpoints"], vnet_id=network.vnet_ids["system"],
)
etcd_clusters = {
    role: EtcdCluster(
        f"{config.cluster_name}-{role}", cluster=etcd_cluster_spec(spec, role), resource_group_name=group.name,
        location=config.location, subnet_id=network.subnet_ids[role], identity=identities.identities[role],
        etcd_pki=etcd_pki, secrets=secrets, backups=etcd_backups, admin_ssh_public_key=config.admin_ssh_public_key,
    )
    for role in (MAIN, EVENTS)
}

pulumi.export("clusterName", config.cluster_name)
pulumi.export("resourceGroupName", group.name)
pulumi.export("vnetIds", network.vnet_ids)
# The apiservers' --etcd-servers and --etcd-servers-overrides=/events#... (infra.etcd.spec.apiserver_etcd_flags).
pulumi.export("etcdClientUrls", etcd_clusters[MAIN].client_urls)
pulumi.export("eventsEtcdClientUrls", etcd_clusters[EVENTS].client_urls)
pulumi.export("etcdBackupAccount", etcd_backups.account_name)
