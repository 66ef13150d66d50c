"""The control plane: the apiservers, outside the cluster, as one scale set behind an internal load balancer.

Each instance runs kube-apiserver, kube-controller-manager and kube-scheduler as systemd services
(``infra.control_plane.apiserver_machine``), and every instance boots the same cloud-init: each decides its
address and serving certificate at boot. The scale set heals and rolls itself
(``infra.control_plane.scale_set``): Azure replaces an instance whose ``/livez?exclude=etcd`` stays failed,
and rolls a model change (cloud-init, size, release, machine image, a rotated secret) one instance at a time,
the next only once the last is healthy, so one ``pulumi up`` makes a change and never takes every apiserver
down at once. Each instance's readiness extension (a CustomScript) re-fetches the secrets, restarts the
components and waits for the local ``/readyz``; it runs when the instance is created and, rolled, when a
secret the apiservers read gets a new version. The kubernetes provider (and so every in-cluster object) waits
for the scale set.

A stack deployed with individual apiserver VMs keeps them beside the scale set and retires one per deploy
(infra/assembly/desired_cluster.py, docs/day2.md); each such VM keeps its readiness gate, the gates in a chain
(gate ``i`` after gate ``i-1``) without a dependency in Pulumi's graph (``after``).

Outputs: ``endpoint`` (the load balancer), ``ca_cert_pem`` and ``kubernetes_provider`` for everything applied
inside the cluster. The provider's kubeconfig holds no credential: it names the command that mints a
short-lived one on an apiserver instance at deploy time (``infra.control_plane.access``), so no administrator
credential is kept in state or handed out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import pulumi

from components import declare
from components.cluster_pki import ClusterPki
from components.identities import RoleIdentities
from components.machines import ADMIN_USERNAME, DedicatedVm, VmArgs, linux_ssh_only
from components.secret_store import SecretStore
from infra.assembly.desired_cluster import ApiserverScaleSet, DedicatedMachine
from infra.boot import secret_names
from infra.catalog.vm_sizes import VM_SIZES
from infra.cluster.cluster_spec import ClusterSpec
from infra.config import naming
from infra.control_plane import access, apiserver, apiserver_machine, pki, scale_set, token_minting
from infra.day2.deploy_rules import APISERVER_ROLE, MACHINE_ROLE_TAG
from infra.facts import ports, roles
from infra.facts.endpoints import apiserver_url
from infra.facts.tags import CLOUD_INIT as CLOUD_INIT_TAG

if TYPE_CHECKING:
    from azure_inputs import ComputeVirtualMachineExtensionProps  # typings/azure_inputs.pyi

# Probe: the apiserver's own readiness over HTTPS (Azure does not validate the certificate).
PROBE_INTERVAL_SECONDS = 5
PROBE_THRESHOLD = 2  # consecutive results before a backend changes state
# WATCH connections are long-lived; Standard LB allows 4-100 minutes, TCP reset tells clients at once.
IDLE_TIMEOUT_MINUTES = 30
OS_DISK_GB = 128  # audit logs (up to 4 GB) and binaries
T = TypeVar("T")
# CustomScript extension for Linux (learn.microsoft.com/azure/virtual-machines/extensions/custom-script-linux).
CUSTOM_SCRIPT: ComputeVirtualMachineExtensionProps = {
    "publisher": "Microsoft.Azure.Extensions",
    "type": "CustomScript",
    "typeHandlerVersion": "2.1",
}


class ControlPlane(pulumi.ComponentResource):
    endpoint: str
    ca_cert_pem: pulumi.Output[str]
    kubernetes_provider: pulumi.ProviderResource
    bootstrap_token_id: pulumi.Output[str]
    bootstrap_token_secret: pulumi.Output[str]
    load_balancer: declare.Declared
    scale_set: declare.Declared  # every apiserver (infra/control_plane/scale_set.py)
    vms: list[DedicatedVm]  # the apiserver VMs a stack moving to the scale set still has
    ready: list[declare.Declared]  # each such VM's readiness gate (a CustomScript extension)

    def __init__(
        self,
        name: str,
        *,
        spec: ClusterSpec,
        resource_group_name: pulumi.Input[str],
        subscription_id: pulumi.Input[str],
        subnet_id: pulumi.Input[str],
        identities: RoleIdentities,
        secrets: SecretStore,
        apiservers: ApiserverScaleSet,
        retiring: Sequence[DedicatedMachine],
        image_id_of: Callable[[str], pulumi.Input[str]],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """``apiservers``: the scale set as the assembly decided it (``Cluster.apiservers``); ``retiring``: the
        apiserver VMs a stack moving to it still has (``Cluster.machines_of(roles.APISERVER)``, each as it runs);
        ``image_id_of``: the id of a machine image version (cpu kind)."""
        super().__init__("supercluster:control_plane:ControlPlane", name, None, opts)
        self._name, self._config = name, spec.config
        self._resource_group_name = resource_group_name
        self._image_id_of = image_id_of
        addresses = spec.addresses
        certificate_specs = pki.certificates()
        self.endpoint = apiserver_url(addresses.apiserver_lb_ip())

        issued = ClusterPki(f"{name}-pki", specs=certificate_specs, opts=pulumi.ResourceOptions(parent=self))
        self.ca_cert_pem = issued.cas[pki.CLUSTER_CA].cert_pem
        vm_names = [m.name for m in retiring]
        deploy_kubeconfig = pulumi.Output.all(self.ca_cert_pem, resource_group_name).apply(
            lambda values: access.deploy_kubeconfig(self.endpoint, values[0], values[1], apiservers.name, vm_names)
        )
        self._bootstrap_token()
        fetched = self._store_secrets(issued, certificate_specs, identities, secrets)
        backend_pool_id = self._load_balancer(addresses.apiserver_lb_ip(), subnet_id, subscription_id)
        self._apiservers(
            apiservers, retiring, subnet_id, backend_pool_id, identities.ids[roles.APISERVER.identity], fetched
        )

        # Replaced only if the cluster itself changes; a changed kubeconfig is an update. In-cluster
        # objects go through the load balancer: once the scale set is created (each instance's readiness
        # extension saw its /readyz) or updated, they are applied.
        self.kubernetes_provider = declare.provider(
            "kubernetes",
            f"{name}-k8s",
            {
                "kubeconfig": after(self.scale_set.output("name"), deploy_kubeconfig),
                "clusterIdentifier": self._config.cluster_name,
            },
            pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs(
            {
                "endpoint": self.endpoint,
                "caCertPem": self.ca_cert_pem,
                "apiserverScaleSet": apiservers.name,
            }
        )

    def _bootstrap_token(self) -> None:
        """``<id>.<secret>``, both ``[a-z0-9]``; the secret half is a Pulumi secret from the start. The first token
        only (the minter on the apiservers makes every later one). Its keeper names the tokens' lifetime: a stack
        deployed before tokens expired holds a first token that never does, whose Secret the program no longer
        rewrites (``ignore_changes``, components/cluster_bootstrap.py); the keeper makes a new token there, so its
        Secret, under a new name, is created with an expiration and the old one is deleted."""
        charset = {"upper": False, "lower": True, "numeric": True, "special": False}  # token_minting.TOKEN_ALPHABET
        keepers = {"lifetimeSeconds": str(token_minting.LIFETIME_SECONDS)}
        child = pulumi.ResourceOptions(parent=self)
        self.bootstrap_token_id = declare.random(
            "RandomString",
            f"{self._name}-bootstrap-token-id",
            {"length": token_minting.TOKEN_ID_LENGTH, **charset, "keepers": keepers},
            child,
            outputs=["result"],
        ).output("result")
        self.bootstrap_token_secret = pulumi.Output.secret(
            declare.random(
                "RandomPassword",
                f"{self._name}-bootstrap-token-secret",
                {"length": token_minting.TOKEN_SECRET_LENGTH, **charset, "keepers": keepers},
                child,
                outputs=["result"],
            ).output("result")
        )

    def _store_secrets(
        self,
        issued: ClusterPki,
        certificate_specs: tuple[pki.CertificateSpec, ...],
        identities: RoleIdentities,
        secrets: SecretStore,
    ) -> list[declare.Declared]:
        """Every key, certificate and token into Key Vault, each readable by exactly the roles that need
        it. Returns the secrets the apiserver VMs fetch (the bootstrap token is for nodes only)."""
        apiserver_id, node_id, nat_id = roles.APISERVER.identity, roles.NODE_IDENTITY, roles.NAT_HOST.identity
        role = {r: identities.principal_ids[r] for r in (apiserver_id, node_id, nat_id)}
        apiserver_only = {apiserver_id: role[apiserver_id]}
        # Every Secret in etcd is encrypted with it: a new key would leave them unreadable. Protected.
        encryption_key = declare.random(
            "RandomBytes",
            f"{self._name}-encryption-key",
            {"length": 32},
            pulumi.ResourceOptions(parent=self, protect=True),
            outputs=["base64"],
        )
        values = {
            pki.cert_secret(pki.CLUSTER_CA): (self.ca_cert_pem, role),
            pki.key_secret(pki.CLUSTER_CA): (issued.cas[pki.CLUSTER_CA].key_pem, apiserver_only),
            pki.cert_secret(pki.FRONT_PROXY_CA): (issued.cas[pki.FRONT_PROXY_CA].cert_pem, apiserver_only),
            pki.SERVICE_ACCOUNT_KEY_SECRET: (issued.service_account_key.output("privateKeyPem"), apiserver_only),
            pki.SERVICE_ACCOUNT_PUB_SECRET: (issued.service_account_key.output("publicKeyPem"), apiserver_only),
            pki.ENCRYPTION_CONFIG_SECRET: (
                encryption_key.output("base64").apply(apiserver.encryption_config),
                apiserver_only,
            ),
        }
        for spec in certificate_specs:
            values[pki.cert_secret(spec.key)] = (issued.certs[spec.key].cert_pem, apiserver_only)
            values[pki.key_secret(spec.key)] = (issued.certs[spec.key].key_pem, apiserver_only)
        fetched = [
            secrets.add_secret(self, f"{self._name}-{secret_name}", secret_name, value, readers)
            for secret_name, (value, readers) in values.items()
        ]
        secrets.add_secret(
            self,
            f"{self._name}-{secret_names.NODE_BOOTSTRAP_TOKEN}",
            secret_names.NODE_BOOTSTRAP_TOKEN,
            pulumi.Output.concat(self.bootstrap_token_id, ".", self.bootstrap_token_secret),
            {node_id: role[node_id], nat_id: role[nat_id]},
            # The first token only: the apiservers' token minter writes each next one (token_minting.py).
            writers=apiserver_only,
        )
        return fetched

    def _load_balancer(
        self, frontend_ip: str, subnet_id: pulumi.Input[str], subscription_id: pulumi.Input[str]
    ) -> pulumi.Output[str]:
        """The internal Standard load balancer in front of the apiservers; returns its backend pool's id."""
        lb_name = naming.apiserver_load_balancer(self._config.cluster_name)
        # The rule names the LB's own frontend, pool and probe, whose ids exist only once it does.
        lb_id = pulumi.Output.concat(
            "/subscriptions/",
            subscription_id,
            "/resourceGroups/",
            self._resource_group_name,
            "/providers/Microsoft.Network/loadBalancers/",
            lb_name,
        )
        pool_id = pulumi.Output.concat(lb_id, "/backendAddressPools/apiservers")
        self.load_balancer = declare.azure(
            "network:LoadBalancer",
            f"{self._name}-lb",
            {
                "loadBalancerName": lb_name,
                "resourceGroupName": self._resource_group_name,
                "location": self._config.location,
                "sku": {"name": "Standard", "tier": "Regional"},
                "frontendIPConfigurations": [
                    {
                        "name": "apiserver",
                        "privateIPAddress": frontend_ip,
                        "privateIPAllocationMethod": "Static",
                        "subnet": {"id": subnet_id},
                        "zones": list(apiserver_machine.ZONES),  # zone-redundant frontend
                    }
                ],
                "backendAddressPools": [{"name": "apiservers"}],
                "probes": [
                    {
                        "name": "readyz",
                        "protocol": "Https",
                        "port": ports.APISERVER,
                        "requestPath": "/readyz",
                        "intervalInSeconds": PROBE_INTERVAL_SECONDS,
                        "probeThreshold": PROBE_THRESHOLD,
                    }
                ],
                "loadBalancingRules": [
                    {
                        "name": "apiserver",
                        "protocol": "Tcp",
                        "frontendPort": ports.APISERVER,
                        "backendPort": ports.APISERVER,
                        "frontendIPConfiguration": {
                            "id": pulumi.Output.concat(lb_id, "/frontendIPConfigurations/apiserver")
                        },
                        "backendAddressPool": {"id": pool_id},
                        "probe": {"id": pulumi.Output.concat(lb_id, "/probes/readyz")},
                        "idleTimeoutInMinutes": IDLE_TIMEOUT_MINUTES,
                        "enableTcpReset": True,
                        "loadDistribution": "Default",
                    }
                ],
            },
            # Every node, kubeconfig and consumer reaches the cluster through its frontend: protected.
            pulumi.ResourceOptions(parent=self, protect=True),
        )
        return pool_id

    def _apiservers(
        self,
        apiservers: ApiserverScaleSet,
        retiring: Sequence[DedicatedMachine],
        subnet_id: pulumi.Input[str],
        backend_pool_id: pulumi.Input[str],
        identity_id: pulumi.Input[str],
        fetched: list[declare.Declared],
    ) -> None:
        """The scale set, and the VMs a stack moving to it still has, each with its readiness gate."""
        # Changes whenever a secret the apiservers fetch gets a new version: the readiness extensions re-run.
        secrets_version = pulumi.Output.unsecret(
            pulumi.Output.all(
                *[secret.output("properties").apply(lambda p: p["secretUriWithVersion"]) for secret in fetched]
            ).apply(_digest)
        )
        where = _Placement(subnet_id, backend_pool_id, identity_id, secrets_version, fetched)
        self.scale_set = self._scale_set(apiservers, where)
        self.vms, self.ready = [], []
        for m in retiring:
            self._retiring_vm(m, where)

    def _scale_set(self, apiservers: ApiserverScaleSet, where: _Placement) -> declare.Declared:
        """Every apiserver, from one model, in the load balancer's pool. Azure replaces an instance whose
        ``/livez?exclude=etcd`` stays failed and rolls a model change out one instance at a time
        (infra/control_plane/scale_set.py). Its readiness extension runs at every instance's creation and again,
        rolled, when a fetched secret gets a new version (``forceUpdateTag``). Protected: replacing or deleting
        it takes every apiserver at once."""
        config, state = self._config, apiservers.state
        readiness = {
            "name": scale_set.READINESS_EXTENSION_NAME,
            **CUSTOM_SCRIPT,
            "autoUpgradeMinorVersion": True,
            "settings": {"commandToExecute": apiserver_machine.readiness_command()},
            "forceUpdateTag": where.secrets_version,
        }
        return declare.azure(
            "compute:VirtualMachineScaleSet",
            f"{self._name}-apiservers",
            {
                "vmScaleSetName": apiservers.name,
                "resourceGroupName": self._resource_group_name,
                "location": config.location,
                "zones": list(apiservers.zones),
                "sku": {"name": state.vm_size, "tier": "Standard", "capacity": apiservers.capacity},
                "orchestrationMode": "Uniform",
                # Overprovisioned extra VMs would boot, take leases and join the load balancer, then vanish.
                "overprovision": False,
                "upgradePolicy": scale_set.upgrade_policy(apiservers.capacity),
                "automaticRepairsPolicy": scale_set.automatic_repairs_policy(),
                "identity": {"type": "UserAssigned", "userAssignedIdentities": [where.identity_id]},
                "virtualMachineProfile": {
                    "osProfile": {
                        "computerNamePrefix": apiservers.computer_name_prefix,
                        "adminUsername": ADMIN_USERNAME,
                        "customData": apiservers.custom_data,
                        "linuxConfiguration": linux_ssh_only(config.admin_ssh_public_key),
                    },
                    "storageProfile": {
                        "imageReference": {"id": self._image_id_of(state.image_version)},
                        "osDisk": {
                            "createOption": "FromImage",
                            "caching": "ReadWrite",
                            "diskSizeGB": OS_DISK_GB,
                            "managedDisk": {"storageAccountType": "Premium_LRS"},
                        },
                    },
                    "networkProfile": {
                        "networkInterfaceConfigurations": [
                            {
                                "name": "nic",
                                "primary": True,
                                "enableAcceleratedNetworking": True,
                                "ipConfigurations": [
                                    {
                                        "name": "primary",
                                        "primary": True,
                                        "subnet": {"id": where.subnet_id},
                                        "loadBalancerBackendAddressPools": [{"id": where.backend_pool_id}],
                                    }
                                ],
                            }
                        ]
                    },
                    "securityProfile": {"encryptionAtHost": VM_SIZES[state.vm_size].encryption_at_host},
                    "extensionProfile": {"extensions": [readiness, scale_set.health_extension()]},
                },
                "tags": {MACHINE_ROLE_TAG: APISERVER_ROLE, CLOUD_INIT_TAG: state.cloud_init},
            },
            pulumi.ResourceOptions(
                parent=self,
                protect=True,
                # Its first boot must find its secrets; the load balancer (and its frontend's static address,
                # the subnet's first) exists before any instance takes an address from the subnet.
                depends_on=[*where.fetched, self.load_balancer],
            ),
            outputs=["name"],
        )

    def _retiring_vm(self, m: DedicatedMachine, where: _Placement) -> None:
        """An apiserver VM of a stack moving to the scale set, kept as it runs (HELD) until its deploy retires
        it (infra/assembly/desired_cluster.py). Its readiness gate runs after the previous one's, as before."""
        vm = DedicatedVm(
            f"{self._name}-vm-{m.index}",
            VmArgs(
                resource_group_name=self._resource_group_name,
                location=self._config.location,
                vm_name=m.name,
                vm_size=m.size,
                subnet_id=where.subnet_id,
                private_ip=m.address,
                identity_id=where.identity_id,
                custom_data=m.custom_data,
                custom_data_fingerprint=m.fingerprint,
                admin_ssh_public_key=self._config.admin_ssh_public_key,
                image_id=self._image_id_of(m.image_version),
                zone=m.zone,
                os_disk_gb=OS_DISK_GB,
                backend_pool_ids=[where.backend_pool_id],
                tags={MACHINE_ROLE_TAG: APISERVER_ROLE},
                lifecycle=m.lifecycle,
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=where.fetched),
        )
        force_update_tag: pulumi.Output[str] = (
            after(self.ready[-1].output("name"), where.secrets_version) if self.ready else where.secrets_version
        )
        gate = declare.azure(
            "compute:VirtualMachineExtension",
            f"{self._name}-ready-{m.index}",
            {
                "vmExtensionName": scale_set.READINESS_EXTENSION_NAME,
                "vmName": vm.vm.output("name"),  # a property dependency: the gate is replaced with its VM
                "resourceGroupName": self._resource_group_name,
                "location": self._config.location,
                "autoUpgradeMinorVersion": True,
                "settings": {"commandToExecute": apiserver_machine.readiness_command()},
                "forceUpdateTag": force_update_tag,
                **CUSTOM_SCRIPT,
            },
            pulumi.ResourceOptions(parent=self),
            outputs=["name"],
        )
        self.vms.append(vm)
        self.ready.append(gate)


@dataclass(frozen=True)
class _Placement:
    """What every apiserver, instance or VM, is given: its subnet, the load balancer's pool, the apiserver
    identity, the fetched secrets' version (its readiness re-runs when it changes) and the secrets themselves."""

    subnet_id: pulumi.Input[str]
    backend_pool_id: pulumi.Input[str]
    identity_id: pulumi.Input[str]
    secrets_version: pulumi.Output[str]
    fetched: list[declare.Declared]


def after(signal: pulumi.Output[Any], value: pulumi.Input[T]) -> pulumi.Output[T]:
    """``value`` (with its own dependencies), available only once ``signal`` has resolved, without a
    dependency on the resource ``signal`` comes from. A resource whose input this is registers after
    that resource's create or update has finished, so `pulumi up` keeps the order, but Pulumi's graph
    has no edge between them: a targeted destroy of the one with ``--target-dependents`` stops short
    of the other."""

    async def wait() -> pulumi.Input[T]:
        await signal.future(with_unknowns=True)
        return value

    # The SDK resolves the awaited Input too; its annotations cannot say so (Awaitable[Input[T]]).
    return pulumi.Output.from_input(wait())  # type: ignore[arg-type]


def _digest(values: list) -> str:
    """A short, stable tag that changes whenever any of ``values`` (secret versions) does."""
    return hashlib.sha256("\n".join(str(v) for v in values).encode()).hexdigest()[:16]
