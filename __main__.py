"""supercluster: load config, build the cluster, export outputs. Nothing else lives here."""

import pulumi
import pulumi_azure_native as azure

from components import aliases
from components.addons import ClusterAddons
from components.cluster_outputs import export_cluster_contract
from components.identities import RoleIdentities
from components.image_registry import ImageRegistry
from components.network import ClusterNetwork
from components.node_pool import NodePool
from components.secret_store import SecretStore
from components.stack_config import load_cluster_spec
from infra import naming
from infra.addons import AzureAccess
from infra.images import cache_prefixes
from infra.node.pool import preload_images

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
registry = ImageRegistry(
    f"{config.cluster_name}-registry", cluster_name=config.cluster_name, resource_group_name=group.name,
    location=config.location, subscription_id=client.subscription_id,
    cache_rules=cache_prefixes(preload_images(config)), endpoint_subnet_id=network.subnet_ids["endpoints"],
    vnet_ids=network.vnet_ids, pull_principal_id=identities.identities["node"].principal_id,
)
# Boot steps every node runs before kubelet (each adds to the node's CloudConfig); traffic accounting's
# mangle rules belong here: node_boot_steps = [lambda cloud: add_traffic_accounting(cloud, ...)].
node_boot_steps: list = []
node_pools = {
    pool.name: NodePool(
        f"{config.cluster_name}-pool-{pool.name}", cluster=spec, pool=pool, resource_group_name=group.name,
        subnet_ids=network.subnet_ids, identity_id=identities.identities["node"].id, vault_name=secrets.vault_name,
        registry_login_server=registry.login_server, before_kubelet=node_boot_steps,
    )
    for pool in config.node_pools
}


def declare_addons(kubernetes_provider: pulumi.ProviderResource,
                   autoscaler_identity_client_id: pulumi.Input[str],
                   opts: pulumi.ResourceOptions | None = None) -> ClusterAddons:
    """The cluster add-ons (DNS, autoscaler, balloons, GPU, traffic accounting, Prometheus).

    For the integrator: call once the control plane exists, with
    ``control_plane.kubernetes_provider`` and the client ID of the managed identity the
    autoscaler signs in as (see README "Cluster add-ons").
    """
    return ClusterAddons(
        f"{config.cluster_name}-addons", spec=spec, provider=kubernetes_provider,
        azure=AzureAccess(subscription_id=client.subscription_id,
                          resource_group=naming.resource_group(config.cluster_name),
                          identity_client_id=autoscaler_identity_client_id),
        opts=opts,
    )


def export_contract(*, ca_certificate: pulumi.Input[str], admin_kubeconfig: pulumi.Input[str],
                    etcd_backup_storage_account_id: pulumi.Input[str],
                    etcd_backup_container_url: pulumi.Input[str]) -> None:
    """The versioned ``cluster`` output other teams read (README "Outputs contract").

    For the integrator: call once the control plane (cluster CA PEM, admin kubeconfig) and etcd
    (backup storage account id and container URL) exist.
    """
    export_cluster_contract(
        spec, resource_group_name=group.name, vnet_ids=network.vnet_ids, subnet_ids=network.subnet_ids,
        scale_set_ids={shard: vmss.id for pool in node_pools.values() for shard, vmss in pool.scale_sets.items()},
        ca_certificate=ca_certificate, admin_kubeconfig=admin_kubeconfig,
        etcd_backup_storage_account_id=etcd_backup_storage_account_id,
        etcd_backup_container_url=etcd_backup_container_url,
    )


pulumi.export("clusterName", config.cluster_name)
pulumi.export("resourceGroupName", group.name)
pulumi.export("vnetIds", network.vnet_ids)
pulumi.export("registryLoginServer", registry.login_server)
pulumi.export("nodeScaleSets", {name: {shard: vmss.name for shard, vmss in pool.scale_sets.items()}
                                for name, pool in node_pools.items()})
