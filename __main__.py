"""supercluster: load config, build the cluster, export outputs. Nothing else lives here."""

import pulumi
import pulumi_azure_native as azure

from components import aliases
from components.addons import ClusterAddons
from components.cluster_outputs import export_cluster_contract
from components.identities import RoleIdentities
from components.network import ClusterNetwork
from components.secret_store import SecretStore
from components.stack_config import load_cluster_spec
from infra import naming
from infra.addons import AzureAccess

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


def export_contract(*, scale_set_ids: dict[str, pulumi.Input[str]], ca_certificate: pulumi.Input[str],
                    admin_kubeconfig: pulumi.Input[str], etcd_backup_storage_account_id: pulumi.Input[str],
                    etcd_backup_container_url: pulumi.Input[str]) -> None:
    """The versioned ``cluster`` output other teams read (README "Outputs contract").

    For the integrator: call once, after the node pools (every shard name -> its scale set id),
    the control plane (cluster CA PEM, admin kubeconfig) and etcd (backup account and container).
    """
    export_cluster_contract(
        spec, resource_group_name=group.name, vnet_ids=network.vnet_ids, subnet_ids=network.subnet_ids,
        scale_set_ids=scale_set_ids, ca_certificate=ca_certificate, admin_kubeconfig=admin_kubeconfig,
        etcd_backup_storage_account_id=etcd_backup_storage_account_id,
        etcd_backup_container_url=etcd_backup_container_url,
    )


pulumi.export("clusterName", config.cluster_name)
pulumi.export("resourceGroupName", group.name)
pulumi.export("vnetIds", network.vnet_ids)
