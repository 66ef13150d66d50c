"""NAT hosts under mocks: an internal Standard LB with HA ports in front of forwarding VMs that share one cloud-init."""

from __future__ import annotations

import base64

from components.nat_hosts import NatHosts
from infra.assembly.desired_cluster import assemble
from infra.boot.cloudinit import render
from infra.boot.secret_names import NODE_JOIN_FILES
from infra.facts import roles
from infra.nat_hosts import KUBE_PROXY_HEALTHZ_PORT, nat_host_cloud_config
from infra.network.addressing import plan_addresses
from plan.artifacts import file_content
from plan.runner import run_declarations
from tests.helpers import load_yaml, parsed, raw_config

LB = "azure-native:network:LoadBalancer"
NIC = "azure-native:network:NetworkInterface"
VM = "azure-native:compute:VirtualMachine"


def declare(stack: str = "prod"):
    cluster = assemble(raw_config(stack), "eastus")
    config, plan = cluster.spec.config, cluster.spec.addresses

    def program():
        NatHosts(
            "c-nat-hosts",
            cluster_name=config.cluster_name,
            load_balancer_ip=plan.nat_lb_ip(),
            machines=cluster.machines_of(roles.NAT_HOST),
            resource_group_name="c-rg",
            location="eastus",
            subscription_id="sub",
            subnet_id="/subnets/nat",
            identity_id="/identities/nat",
            admin_ssh_public_key=config.admin_ssh_public_key,
            image_id_of=lambda version: f"/galleries/c.images/images/c-cpu/versions/{version}",
        )

    return config, plan, run_declarations(program)


def test_an_internal_standard_load_balancer_spreads_every_port_over_the_hosts():
    config, plan, run = declare()
    lb = run.named("c-nat-hosts-lb", LB).inputs
    assert lb["sku"] == {"name": "Standard", "tier": "Regional"}
    assert lb["loadBalancerName"] == "prod-nat-lb"
    frontend = lb["frontendIPConfigurations"][0]
    assert (frontend["name"], frontend["privateIPAddress"], frontend["privateIPAllocationMethod"]) == (
        "services",
        plan.nat_lb_ip(),
        "Static",
    )
    assert frontend["subnet"]["id"] == "/subnets/nat" and "publicIPAddress" not in frontend
    rule = lb["loadBalancingRules"][0]
    assert (rule["protocol"], rule["frontendPort"], rule["backendPort"]) == ("All", 0, 0)  # HA ports
    lb_id = "/subscriptions/sub/resourceGroups/c-rg/providers/Microsoft.Network/loadBalancers/prod-nat-lb"
    assert rule["frontendIPConfiguration"]["id"] == f"{lb_id}/frontendIPConfigurations/services"
    assert rule["probe"]["id"] == f"{lb_id}/probes/kube-proxy"
    probe = lb["probes"][0]
    assert (probe["protocol"], probe["port"], probe["requestPath"]) == ("Http", KUBE_PROXY_HEALTHZ_PORT, "/healthz")


def test_each_host_forwards_from_its_static_address_in_the_backend_pool():
    config, plan, run = declare()
    nics = run.of_type(NIC)
    assert len(nics) == config.network.nat_hosts.count == 3
    lb_id = run.named("c-nat-hosts-lb", LB).id
    for nic, ip in zip(nics, plan.nat_host_ips(3), strict=True):
        assert nic.inputs["enableIPForwarding"] is True
        (ipconfig,) = nic.inputs["ipConfigurations"]
        assert (ipconfig["privateIPAddress"], ipconfig["privateIPAllocationMethod"]) == (ip, "Static")
        assert ipconfig["loadBalancerBackendAddressPools"] == [{"id": f"{lb_id}/backendAddressPools/nat-hosts"}]
    vms = run.of_type(VM)
    assert [vm.inputs["vmName"] for vm in vms] == ["prod-nat-0", "prod-nat-1", "prod-nat-2"]
    assert all(vm.inputs["hardwareProfile"]["vmSize"] == "Standard_D16ds_v5" for vm in vms)
    assert all(vm.inputs["identity"]["userAssignedIdentities"] == ["/identities/nat"] for vm in vms)


def test_every_host_gets_the_same_cloud_init_with_nat_rules_join_secrets_and_accounting():
    _, _, run = declare()
    custom_data = {vm.inputs["osProfile"]["customData"] for vm in run.of_type(VM)}
    assert len(custom_data) == 1, "rendered once, identical on every host"
    document = load_yaml(base64.b64decode(custom_data.pop()))
    paths = {f["path"] for f in document["write_files"]}
    assert {
        "/etc/supercluster/iptables/nat-hosts.rules",
        "/etc/supercluster/iptables/traffic-accounting.rules",
        "/etc/sysctl.d/60-supercluster-nat-host.conf",
        "/usr/local/sbin/supercluster-fetch-secrets",
    } <= paths
    fetch = next(file_content(f) for f in document["write_files"] if f["path"].endswith("fetch-secrets"))
    for secret in NODE_JOIN_FILES:
        assert f"fetch {secret.secret_name} {secret.path} {secret.mode}" in fetch
    assert ["systemctl", "enable", "--now", "supercluster-nat-hosts.service"] in document["runcmd"]


def test_traffic_accounting_follows_its_addon_switch():
    config = parsed("dev")
    plan = plan_addresses(config)
    on = render(nat_host_cloud_config(config, plan, "kv", kubernetes_version=config.kubernetes_version))
    off = render(
        nat_host_cloud_config(
            parsed("dev", addons={"trafficAccounting": {"enabled": False}}),
            plan,
            "kv",
            kubernetes_version=config.kubernetes_version,
        )
    )
    assert "traffic-accounting.rules" in on and "traffic-accounting.rules" not in off
    assert "nat-hosts.rules" in off
