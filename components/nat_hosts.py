"""The NAT hosts: a few forwarding VMs behind an internal Standard load balancer with HA ports.

The hub routes the service range to the load balancer's frontend (a virtual appliance
next hop); the HA-ports rule (protocol All, port 0) hands every flow, whatever its port,
to a healthy host, and the packet keeps its service IP as destination
(learn.microsoft.com/azure/load-balancer/load-balancer-ha-ports-overview). The hosts
translate it (``infra/nat_hosts.py``). Health is kube-proxy's own health endpoint, so a
host whose service rules are stale gets no new flows.

A new cloud-init (every Kubernetes release reaches it) or size is rolled one host per deploy
(``infra.day2.stage``, docs/day2.md): Azure refuses a customData change on an existing VM, so the
host is replaced, deleted first, while the others carry the flows.
"""

from __future__ import annotations

from collections.abc import Callable

import pulumi

from components import declare
from components.machines import DedicatedVm, VmArgs
from infra import naming
from infra.addressing import AddressPlan
from infra.cloudinit import custom_data, fingerprint
from infra.config import ClusterConfig
from infra.day2 import MACHINE_ROLE_TAG, NAT_HOST_ROLE, LastDeploy, MachineState, previous_machines, stage
from infra.nat_hosts import KUBE_PROXY_HEALTHZ_PATH, KUBE_PROXY_HEALTHZ_PORT

FRONTEND = "services"
BACKEND_POOL = "nat-hosts"
PROBE = "kube-proxy"
# Azure's shortest probe interval is 5 s; two failures in a row take a host out (probe_threshold).
PROBE_INTERVAL_SECONDS = 5
PROBE_THRESHOLD = 2


class NatHosts(pulumi.ComponentResource):
    load_balancer_ip: str
    host_ips: tuple[str, ...]

    def __init__(
        self,
        name: str,
        *,
        config: ClusterConfig,
        plan: AddressPlan,
        resource_group_name: pulumi.Input[str],
        location: str,
        subscription_id: pulumi.Input[str],
        subnet_id: pulumi.Input[str],
        identity_id: pulumi.Input[str],
        cloud_init: str,
        image_id_of: Callable[[str], pulumi.Input[str]],
        image_version: str,
        kubernetes_version: str | None = None,
        last_deploy: LastDeploy | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("supercluster:nat:NatHosts", name, None, opts)
        cluster = config.cluster_name
        self.load_balancer_ip = plan.nat_lb_ip()
        self.host_ips = plan.nat_host_ips(config.network.nat_hosts.count)
        lb_name = naming.nat_load_balancer(cluster)
        # The rule names the LB's own frontend, pool and probe by id, before the LB exists.
        lb_id = pulumi.Output.concat(
            "/subscriptions/",
            subscription_id,
            "/resourceGroups/",
            resource_group_name,
            "/providers/Microsoft.Network/loadBalancers/",
            lb_name,
        )
        lb = declare.azure(
            "network:LoadBalancer",
            f"{name}-lb",
            {
                "loadBalancerName": lb_name,
                "resourceGroupName": resource_group_name,
                "location": location,
                "sku": {"name": "Standard", "tier": "Regional"},
                "frontendIPConfigurations": [
                    {
                        "name": FRONTEND,
                        "privateIPAddress": self.load_balancer_ip,
                        "privateIPAllocationMethod": "Static",
                        "subnet": {"id": subnet_id},
                    }
                ],
                "backendAddressPools": [{"name": BACKEND_POOL}],
                "probes": [
                    {
                        "name": PROBE,
                        "protocol": "Http",
                        "port": KUBE_PROXY_HEALTHZ_PORT,
                        "requestPath": KUBE_PROXY_HEALTHZ_PATH,
                        "intervalInSeconds": PROBE_INTERVAL_SECONDS,
                        "probeThreshold": PROBE_THRESHOLD,
                    }
                ],
                "loadBalancingRules": [
                    {
                        "name": "ha-ports",
                        "protocol": "All",
                        "frontendPort": 0,
                        "backendPort": 0,
                        "frontendIPConfiguration": {
                            "id": pulumi.Output.concat(lb_id, f"/frontendIPConfigurations/{FRONTEND}")
                        },
                        "backendAddressPool": {
                            "id": pulumi.Output.concat(lb_id, f"/backendAddressPools/{BACKEND_POOL}")
                        },
                        "probe": {"id": pulumi.Output.concat(lb_id, f"/probes/{PROBE}")},
                        # The hosts see the original destination (a service IP) either way; no loopback alias needed.
                        "enableFloatingIP": False,
                        "loadDistribution": "Default",  # 5-tuple: a flow stays on one host, whose conntrack owns it
                    }
                ],
            },
            pulumi.ResourceOptions(parent=self),
        )
        pool_id = lb.id.apply(lambda i: f"{i}/backendAddressPools/{BACKEND_POOL}")
        # One cloud-init for every host (rendered once, by infra.cluster): nothing in it is host-specific.
        encoded, digest = custom_data(cloud_init, f"{name} cloud-init"), fingerprint(cloud_init)
        # Rolled one host per deploy (infra/day2.py): the others keep serving flows behind the load balancer.
        want = MachineState(
            digest, config.network.nat_hosts.vm_size, kubernetes_version or config.kubernetes_version, image_version
        )
        self.staged = stage(previous_machines(last_deploy or LastDeploy(), NAT_HOST_ROLE), [want] * len(self.host_ips))
        self.records = [
            staged.state.record(naming.nat_host(cluster, index)) for index, staged in enumerate(self.staged)
        ]
        self.hosts = [
            DedicatedVm(
                f"{name}-{index}",
                VmArgs(
                    resource_group_name=resource_group_name,
                    location=location,
                    vm_name=naming.nat_host(cluster, index),
                    vm_size=self.staged[index].state.vm_size,
                    subnet_id=subnet_id,
                    private_ip=ip,
                    identity_id=identity_id,
                    custom_data=encoded,
                    custom_data_fingerprint=self.staged[index].state.cloud_init,
                    admin_ssh_public_key=config.admin_ssh_public_key,
                    image_id=image_id_of(self.staged[index].state.image_version),
                    enable_ip_forwarding=True,
                    backend_pool_ids=[pool_id],
                    tags={MACHINE_ROLE_TAG: NAT_HOST_ROLE},
                    # Fixed name and static IP: the old VM goes first, its NIC (and pool membership) stays.
                    replaceable=True,
                    ignore_custom_data_changes=not self.staged[index].moves,
                    replace_on_definition_change=self.staged[index].moves,
                ),
                opts=pulumi.ResourceOptions(parent=self),
            )
            for index, ip in enumerate(self.host_ips)
        ]
        self.register_outputs({"loadBalancerIp": self.load_balancer_ip, "hostIps": list(self.host_ips)})
