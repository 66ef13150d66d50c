"""The NAT hosts: a few forwarding VMs behind an internal Standard load balancer with HA ports.

The hub routes the service range to the load balancer's frontend (a virtual appliance
next hop); the HA-ports rule (protocol All, port 0) hands every flow, whatever its port,
to a healthy host, and the packet keeps its service IP as destination
(learn.microsoft.com/azure/load-balancer/load-balancer-ha-ports-overview). The hosts
translate it (``infra/nat_hosts.py``). Health is kube-proxy's own health endpoint, so a
host whose service rules are stale gets no new flows.

A new cloud-init (every Kubernetes release reaches it) or size is rolled one host per deploy (the
assembly stages it, ``infra.day2.deploy_rules.stage``, docs/day2.md): Azure refuses a customData change on an existing
VM, so the host is replaced, deleted first, while the others carry the flows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pulumi

from components import declare
from components.machines import DedicatedVm, VmArgs
from infra.assembly.desired_cluster import DedicatedMachine
from infra.config import naming
from infra.day2.deploy_rules import MACHINE_ROLE_TAG, NAT_HOST_ROLE
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
        cluster_name: str,
        load_balancer_ip: str,
        machines: Sequence[DedicatedMachine],
        resource_group_name: pulumi.Input[str],
        location: str,
        subscription_id: pulumi.Input[str],
        subnet_id: pulumi.Input[str],
        identity_id: pulumi.Input[str],
        admin_ssh_public_key: str,
        image_id_of: Callable[[str], pulumi.Input[str]],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """``machines``: the hosts as the assembly decided them (``Cluster.machines_of(roles.NAT_HOST)``);
        ``image_id_of``: the id of a machine image version (cpu kind)."""
        super().__init__("supercluster:nat:NatHosts", name, None, opts)
        cluster = cluster_name
        self.load_balancer_ip = load_balancer_ip
        self.host_ips = tuple(m.address for m in machines)
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
        self.hosts = [
            DedicatedVm(
                f"{name}-{m.index}",
                VmArgs(
                    resource_group_name=resource_group_name,
                    location=location,
                    vm_name=m.name,
                    vm_size=m.size,
                    subnet_id=subnet_id,
                    private_ip=m.address,
                    identity_id=identity_id,
                    custom_data=m.custom_data,
                    custom_data_fingerprint=m.fingerprint,
                    admin_ssh_public_key=admin_ssh_public_key,
                    image_id=image_id_of(m.image_version),
                    enable_ip_forwarding=True,
                    backend_pool_ids=[pool_id],
                    tags={MACHINE_ROLE_TAG: NAT_HOST_ROLE},
                    # Fixed name and static IP: the old VM goes first, its NIC (and pool membership) stays.
                    lifecycle=m.lifecycle,
                ),
                opts=pulumi.ResourceOptions(parent=self),
            )
            for m in machines
        ]
        self.register_outputs({"loadBalancerIp": self.load_balancer_ip, "hostIps": list(self.host_ips)})
