"""The control plane: dedicated apiserver VMs outside the cluster, behind an internal load balancer.

Each VM runs kube-apiserver, kube-controller-manager and kube-scheduler as systemd services
(``infra.control_plane.apiserver_machine``). The VMs are created in parallel (none waits for another). A later
change to their cloud-init or size reaches one VM per deploy (``infra.day2.deploy_rules.stage``, docs/day2.md): the
first VM that lacks it is replaced (or resized; the assembly decides which), the others ignore their customData
and keep their size,
never a `pulumi up` that takes every apiserver down at once (a VM to replace by hand:
docs/runbooks/replace-an-apiserver.md). Each VM has a readiness gate, a
CustomScript extension that re-fetches the secrets, restarts the components and waits for the local
``/readyz``. The gates run in a chain, gate ``i`` after gate ``i-1``: when a secret the apiservers
read gets a new version (a renewed certificate) every gate runs again, one apiserver at a time, and
one that does not come back ready stops the rest, instead of every apiserver restarting at once
under the reconnecting watches of every node. The kubernetes provider (and so every in-cluster
object) waits for the first gate. Both orders are kept without a dependency in Pulumi's graph
(``after``): replacing an apiserver by the runbook (``pulumi destroy --target <vm>
--target-dependents``) takes its gate with it and nothing else, where a recorded dependency would
also take the other gates, the provider and every object in the cluster.

Outputs: ``endpoint`` (the load balancer), ``ca_cert_pem`` and ``kubernetes_provider`` for everything applied
inside the cluster. The provider's kubeconfig holds no credential: it names the command that mints a
short-lived one on an apiserver VM at deploy time (``infra.control_plane.access``), so no administrator
credential is kept in state or handed out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import pulumi

from components import declare
from components.cluster_pki import ClusterPki
from components.identities import RoleIdentities
from components.machines import DedicatedVm, VmArgs
from components.secret_store import SecretStore
from infra.assembly.desired_cluster import DedicatedMachine
from infra.boot import secret_names
from infra.cluster.cluster_spec import ClusterSpec
from infra.config import naming
from infra.control_plane import access, apiserver, apiserver_machine, cluster_objects, pki
from infra.day2.deploy_rules import APISERVER_ROLE, MACHINE_ROLE_TAG
from infra.facts import ports, roles
from infra.facts.endpoints import apiserver_url

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
    vms: list[DedicatedVm]
    ready: list[declare.Declared]  # each apiserver's readiness gate (a CustomScript extension)

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
        apiservers: Sequence[DedicatedMachine],
        image_id_of: Callable[[str], pulumi.Input[str]],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """``apiservers``: each apiserver as the assembly decided it (``Cluster.machines_of(roles.APISERVER)``:
        address, cloud-init, what it runs, its rollout); ``image_id_of``: the id of a machine image version
        (cpu kind)."""
        super().__init__("supercluster:control_plane:ControlPlane", name, None, opts)
        self._name, self._config = name, spec.config
        self._resource_group_name = resource_group_name
        self._image_id_of = image_id_of
        addresses = spec.addresses
        machines = apiservers
        certificate_specs = pki.certificates()
        self.endpoint = apiserver_url(addresses.apiserver_lb_ip())

        issued = ClusterPki(f"{name}-pki", specs=certificate_specs, opts=pulumi.ResourceOptions(parent=self))
        self.ca_cert_pem = issued.cas[pki.CLUSTER_CA].cert_pem
        vm_names = [m.name for m in machines]
        deploy_kubeconfig = pulumi.Output.all(self.ca_cert_pem, resource_group_name).apply(
            lambda values: access.deploy_kubeconfig(self.endpoint, values[0], values[1], vm_names)
        )
        self._bootstrap_token()
        fetched = self._store_secrets(issued, certificate_specs, identities, secrets)
        backend_pool_id = self._load_balancer(addresses.apiserver_lb_ip(), subnet_id, subscription_id)
        self._apiservers(machines, subnet_id, backend_pool_id, identities.ids[roles.APISERVER.identity], fetched)

        # Replaced only if the cluster itself changes; a changed kubeconfig is an update. In-cluster
        # objects go through the load balancer, so one ready apiserver is enough to apply them: nodes can
        # join while the others are still coming up.
        self.kubernetes_provider = declare.provider(
            "kubernetes",
            f"{name}-k8s",
            {
                "kubeconfig": after(self.ready[0].output("name"), deploy_kubeconfig),
                "clusterIdentifier": self._config.cluster_name,
            },
            pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs(
            {
                "endpoint": self.endpoint,
                "caCertPem": self.ca_cert_pem,
                "apiserverIps": [m.address for m in machines],
            }
        )

    def _bootstrap_token(self) -> None:
        """``<id>.<secret>``, both ``[a-z0-9]``; the secret half is a Pulumi secret from the start."""
        charset = {"upper": False, "lower": True, "numeric": True, "special": False}
        child = pulumi.ResourceOptions(parent=self)
        self.bootstrap_token_id = declare.random(
            "RandomString",
            f"{self._name}-bootstrap-token-id",
            {"length": cluster_objects.TOKEN_ID_LENGTH, **charset},
            child,
            outputs=["result"],
        ).output("result")
        self.bootstrap_token_secret = pulumi.Output.secret(
            declare.random(
                "RandomPassword",
                f"{self._name}-bootstrap-token-secret",
                {"length": cluster_objects.TOKEN_SECRET_LENGTH, **charset},
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
        machines: Sequence[DedicatedMachine],
        subnet_id: pulumi.Input[str],
        backend_pool_id: pulumi.Input[str],
        identity_id: pulumi.Input[str],
        fetched: list[declare.Declared],
    ) -> None:
        """The VMs, created in parallel, each with its readiness gate; the gates run one after another.
        A cloud-init, size or image change reaches one VM per deploy (``infra.day2.deploy_rules.stage``, below), never
        every apiserver at once; a VM to replace by hand: docs/runbooks/replace-an-apiserver.md."""
        config = self._config
        # Changes whenever a secret the apiservers fetch gets a new version: the gates then re-run.
        secrets_version = pulumi.Output.unsecret(
            pulumi.Output.all(
                *[secret.output("properties").apply(lambda p: p["secretUriWithVersion"]) for secret in fetched]
            ).apply(_digest)
        )
        self.vms, self.ready = [], []
        for m in machines:
            vm = DedicatedVm(
                f"{self._name}-vm-{m.index}",
                VmArgs(
                    resource_group_name=self._resource_group_name,
                    location=config.location,
                    vm_name=m.name,
                    vm_size=m.size,
                    subnet_id=subnet_id,
                    private_ip=m.address,
                    identity_id=identity_id,
                    custom_data=m.custom_data,
                    custom_data_fingerprint=m.fingerprint,
                    admin_ssh_public_key=config.admin_ssh_public_key,
                    image_id=self._image_id_of(m.image_version),
                    zone=m.zone,
                    os_disk_gb=OS_DISK_GB,
                    backend_pool_ids=[backend_pool_id],
                    tags={MACHINE_ROLE_TAG: APISERVER_ROLE},
                    lifecycle=m.lifecycle,
                ),
                # The first boot must find its secrets (no VM waits for another VM).
                opts=pulumi.ResourceOptions(parent=self, depends_on=fetched),
            )
            force_update_tag: pulumi.Output[str] = (
                after(self.ready[-1].output("name"), secrets_version) if self.ready else secrets_version
            )
            gate = declare.azure(
                "compute:VirtualMachineExtension",
                f"{self._name}-ready-{m.index}",
                {
                    "vmExtensionName": "apiserver-ready",
                    "vmName": vm.vm.output("name"),  # a property dependency: the gate is replaced with its VM
                    "resourceGroupName": self._resource_group_name,
                    "location": config.location,
                    "autoUpgradeMinorVersion": True,
                    "settings": {"commandToExecute": apiserver_machine.readiness_command()},
                    # Registered once the previous gate has run (created, or updated for new secrets).
                    "forceUpdateTag": force_update_tag,
                    **CUSTOM_SCRIPT,
                },
                pulumi.ResourceOptions(parent=self),
            )
            self.vms.append(vm)
            self.ready.append(gate)


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
