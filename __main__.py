"""supercluster: load config, build the cluster, export outputs. Nothing else lives here."""

import datetime

import pulumi

from components import declare
from components.addons import ClusterAddons
from components.cluster_bootstrap import ClusterBootstrap
from components.cluster_outputs import export_cluster_contract
from components.control_plane import ControlPlane
from components.etcd_backups import EtcdBackupStore
from components.etcd_cluster import EtcdCluster
from components.etcd_pki import EtcdPki
from components.hub import Hub, HubPeerings
from components.identities import RoleIdentities, grant_autoscaler, grant_join_approver
from components.image_registry import ImageRegistry
from components.machine_images import MachineImages
from components.monitoring_access import MonitoringAccess
from components.nat_hosts import NatHosts
from components.network import ClusterNetwork
from components.node_pool import NodePool
from components.secret_store import SecretStore
from components.stack_config import load_cluster
from infra.addons import images as addon_images
from infra.addons import monitoring
from infra.assembly import machine_image
from infra.assembly.desired_cluster import DeployTime
from infra.assembly.machine_image import DEDICATED_KIND, kind_of_pool
from infra.catalog.image_refs import cache_prefixes
from infra.config import naming
from infra.config.sizing import shards
from infra.control_plane import token_minting
from infra.day2.deploy_rules import APISERVER_SCALE_SET_RECORD, MONITORING_OUTPUT, ROLLOUT_OUTPUT
from infra.etcd.backup import account_url
from infra.etcd.membership_change import CLIENT_URL_OUTPUTS
from infra.etcd.spec import MAIN
from infra.facts import roles
from infra.facts.labels import ROLE_SYSTEM
from infra.network.security_groups import monitoring_pools
from infra.node.pool import preload_images

cluster = load_cluster()  # the whole desired cluster, decided before any resource (infra/assembly/desired_cluster.py)
spec = cluster.spec
config, plan = spec.config, spec.addresses
client = declare.azure_client_config()
subscription_id = client.apply(lambda c: c["subscriptionId"])

# Network and shared services.
group = declare.azure(
    "resources:ResourceGroup",
    config.cluster_name,
    {
        "resourceGroupName": naming.resource_group(config.cluster_name),
        "location": config.location,
    },
    pulumi.ResourceOptions(protect=True),
    outputs=["name"],
)
group_name = group.output("name")
# The node pools' scale sets alone: the only group the cluster autoscaler's identity may change.
node_group = declare.azure(
    "resources:ResourceGroup",
    f"{config.cluster_name}-nodes",
    {
        "resourceGroupName": naming.node_resource_group(config.cluster_name),
        "location": config.location,
    },
    pulumi.ResourceOptions(protect=True),
    outputs=["name"],
)
hub = Hub(
    f"{config.cluster_name}-hub",
    cluster_name=config.cluster_name,
    network=config.network,
    plan=plan,
    resource_group_name=group_name,
    location=config.location,
)
network = ClusterNetwork(
    config.cluster_name,
    plan=plan,
    resource_group_name=group_name,
    location=config.location,
    hub_prefixes=hub.address_prefixes,
    monitoring_pools=monitoring_pools(config),
)
HubPeerings(
    f"{config.cluster_name}-hub-peerings",
    hub=hub,
    cluster_name=config.cluster_name,
    plan=plan,
    vnet_ids=network.vnet_ids,
    vnet_names=network.vnet_names,
    resource_group_name=group_name,
)
identities = RoleIdentities(
    f"{config.cluster_name}-id",
    cluster_name=config.cluster_name,
    resource_group_name=group_name,
    location=config.location,
)
secrets = SecretStore(
    f"{config.cluster_name}-secrets",
    cluster_name=config.cluster_name,
    resource_group_name=group_name,
    location=config.location,
    tenant_id=client.apply(lambda c: c["tenantId"]),
    subscription_id=subscription_id,
    endpoint_subnet_id=network.subnet_ids[roles.ENDPOINTS_SUBNET],
    vnet_ids=network.vnet_ids,
)
# The machine images every VM and scale set boots, built by Image Builder into the cluster's gallery.
machine_images = MachineImages(
    f"{config.cluster_name}-images",
    config=config,
    resource_group_name=group_name,
    subscription_id=subscription_id,
)
# Machines: NAT hosts, node pools, etcd, control plane; none waits for another.
nat_hosts = NatHosts(
    f"{config.cluster_name}-nat-hosts",
    cluster_name=config.cluster_name,
    load_balancer_ip=plan.nat_lb_ip(),
    machines=cluster.machines_of(roles.NAT_HOST),
    resource_group_name=group_name,
    location=config.location,
    subscription_id=subscription_id,
    subnet_id=network.subnet_ids[roles.NAT_HOST.subnet],
    identity_id=identities.ids[roles.NAT_HOST.identity],
    admin_ssh_public_key=config.admin_ssh_public_key,
    # The image of the release the nodes run (infra/day2/deploy_rules.py node_machine_image_version).
    image_id_of=lambda version: machine_images.version_id(DEDICATED_KIND, version),
)
grant_join_approver(
    f"{config.cluster_name}-id",
    identities,
    cluster_name=config.cluster_name,
    node_resource_group_id=node_group.id,
    nat_host_ids={str(index): host.vm.id for index, host in enumerate(nat_hosts.hosts)},
    nat_host_nic_ids={str(index): host.nic.id for index, host in enumerate(nat_hosts.hosts)},
    subscription_id=subscription_id,
)
registry = ImageRegistry(
    f"{config.cluster_name}-registry",
    cluster_name=config.cluster_name,
    resource_group_name=group_name,
    location=config.location,
    subscription_id=subscription_id,
    cache_rules=cache_prefixes((*preload_images(config), *addon_images.table())),
    endpoint_subnet_id=network.subnet_ids[roles.ENDPOINTS_SUBNET],
    vnet_ids=network.vnet_ids,
    pull_principal_ids={
        role: identities.principal_ids[role] for role in (roles.NODE_IDENTITY, roles.NAT_HOST.identity)
    },
)
node_pools = {
    pool.name: NodePool(
        f"{config.cluster_name}-pool-{pool.name}",
        config=config,
        pool=pool,
        shards=cluster.shards_of(pool),
        resource_group_name=node_group.output("name"),
        subnet_ids=network.subnet_ids,
        # Only the tainted system pools run the cluster autoscaler (host network), which signs in as its own
        # identity: no machine that runs tenant pods carries an identity that can change a machine.
        identity_ids=[identities.ids[roles.NODE_IDENTITY]]
        + ([identities.ids[roles.AUTOSCALER_IDENTITY]] if pool.role == ROLE_SYSTEM else []),
        image_id=machine_images.version_id(kind_of_pool(pool), spec.node_machine_image_version),
    )
    for pool in config.node_pools
}
grant_autoscaler(
    f"{config.cluster_name}-id",
    identities,
    cluster_name=config.cluster_name,
    node_resource_group_id=node_group.id,
    scale_set_ids={shard: vmss.id for pool in node_pools.values() for shard, vmss in pool.scale_sets.items()},
    node_subnet_ids={
        shard.name: network.subnet_ids[shard.name] for pool in config.node_pools for shard in shards(pool)
    },
    subscription_id=subscription_id,
)

etcd_pki = EtcdPki(
    f"{config.cluster_name}-etcd-pki",
    cluster_name=config.cluster_name,
    secrets=secrets,
    member_principal_ids={
        role.machine: identities.principal_ids[role.identity] for role in (roles.ETCD, roles.EVENTS_ETCD)
    },
    apiserver_principal_id=identities.principal_ids[roles.APISERVER.identity],
)
etcd_backups = EtcdBackupStore(
    f"{config.cluster_name}-etcd-backup-store",
    cluster_name=config.cluster_name,
    resource_group_name=group_name,
    location=config.location,
    subscription_id=subscription_id,
    endpoint_subnet_id=network.subnet_ids[roles.ENDPOINTS_SUBNET],
    vnet_id=network.vnet_ids[roles.SYSTEM_VNET],
)
etcd_clusters = {
    role.machine: EtcdCluster(
        f"{config.cluster_name}-{role.machine}",
        cluster=cluster.etcd[role.machine],
        machines=cluster.machines_of(role),
        resource_group_name=group_name,
        location=config.location,
        subnet_id=network.subnet_ids[role.subnet],
        identity_id=identities.ids[role.identity],
        principal_id=identities.principal_ids[role.identity],
        etcd_pki=etcd_pki,
        secrets=secrets,
        backups=etcd_backups,
        admin_ssh_public_key=config.admin_ssh_public_key,
        image_id=machine_images.version_ids[DEDICATED_KIND],
    )
    for role in (roles.ETCD, roles.EVENTS_ETCD)
}

control_plane = ControlPlane(
    f"{config.cluster_name}-control-plane",
    spec=spec,
    resource_group_name=group_name,
    subscription_id=subscription_id,
    subnet_id=network.subnet_ids[roles.APISERVER.subnet],
    identities=identities,
    secrets=secrets,
    apiservers=cluster.apiservers,
    retiring=cluster.machines_of(roles.APISERVER),
    image_id_of=lambda version: machine_images.version_id(DEDICATED_KIND, version),
)
# In the cluster, through the control plane's kubernetes provider.
ClusterBootstrap(
    f"{config.cluster_name}-bootstrap",
    config=config,
    provider=control_plane.kubernetes_provider,
    token_id=control_plane.bootstrap_token_id,
    token_secret=control_plane.bootstrap_token_secret,
    # The program's one clock read: the first token lives a day from this run (set once, ignore_changes).
    first_token_expiration=token_minting.first_token_expiration(datetime.datetime.now(datetime.UTC)),
)
addons = ClusterAddons(
    f"{config.cluster_name}-addons",
    groups=cluster.addons,
    provider=control_plane.kubernetes_provider,
    deploy_time={
        DeployTime.SUBSCRIPTION_ID: subscription_id,
        DeployTime.AUTOSCALER_CLIENT_ID: identities.client_ids[roles.AUTOSCALER_IDENTITY],
    },
)
if config.addons.monitoring.enabled:
    MonitoringAccess(
        f"{config.cluster_name}-monitoring-access",
        namespace=monitoring.NAMESPACE,
        password_rotation=spec.addons.monitoring.password_rotation,
        provider=control_plane.kubernetes_provider,
        depends_on=[addons.resources[("Namespace", "", monitoring.NAMESPACE)]],
    )

# Outputs: the versioned contract other teams read (docs/outputs-contract.md).
export_cluster_contract(
    spec,
    resource_group_name=group_name,
    vnet_ids=network.vnet_ids,
    subnet_ids=network.subnet_ids,
    scale_set_ids={shard: vmss.id for pool in node_pools.values() for shard, vmss in pool.scale_sets.items()},
    ca_certificate=control_plane.ca_cert_pem,
    etcd_backup_storage_account_id=etcd_backups.account.id,
    etcd_backup_container_url=f"{account_url(config.cluster_name)}/{etcd_clusters[MAIN].spec.backup_container}",
)
# Operator conveniences, not part of the contract.
pulumi.export("registryLoginServer", registry.login_server)
# What this deploy's image templates build: the next deploy refuses other contents under the same version.
pulumi.export(machine_image.OUTPUT_NAME, machine_image.built(config))
pulumi.export(
    "network",
    {
        "addressSpace": str(config.network.address_space),
        "serviceCidr": str(config.network.service_cidr),
        "natLoadBalancerIp": nat_hosts.load_balancer_ip,
        "egressPrefixes": network.egress_prefixes,
        "hub": hub.contract,
    },
)
# What each rolled machine runs, read back by the next deploy to stage the next one (docs/day2.md).
pulumi.export(
    ROLLOUT_OUTPUT,
    {
        "machines": cluster.rollout(),
        APISERVER_SCALE_SET_RECORD: cluster.apiservers.record(),
        "nodeKubernetesVersion": spec.node_kubernetes_version,
        "nodeMachineImageVersion": spec.node_machine_image_version,
    },
)
# The node Prometheus shards, kept by the next deploy while they hold the pools (infra/addons/monitoring).
pulumi.export(MONITORING_OUTPUT, monitoring.deploy_output(spec.addons.monitoring, spec.config))
# Also the last deploy's member counts for the next one (infra/etcd/membership_change.py).
for role, output_name in CLIENT_URL_OUTPUTS.items():
    pulumi.export(output_name, etcd_clusters[role].client_urls)
