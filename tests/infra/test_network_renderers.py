"""What a NAT host and every node receive from the network side, checked without Pulumi."""

from __future__ import annotations

import ipaddress
import subprocess

import pytest

from infra.boot.cloudinit import CloudConfig, render
from infra.config.cluster_config import parse_config
from infra.nat_hosts import NAT_HOST_TAINTS, SYSCTL_PATH, nat_host_cloud_config, sysctls
from infra.network.addressing import plan_addresses
from infra.network.egress import machines_in_vnet, nat_gateways
from infra.network.hub import example_hub_outputs, parse_hub_outputs
from infra.network.iptables import Chain, Rule, render_restore
from infra.network.traffic_counters import accounting_ruleset, add_traffic_accounting
from tests.helpers import parsed, raw_config, require_tool

DEV_CONFIG = parsed("dev")
DEV = plan_addresses(DEV_CONFIG)


def _file(cloud: CloudConfig, path: str) -> str:
    return next(f.content for f in cloud.files if f.path == path)


def test_accounting_loads_before_kubelet_on_every_boot_including_the_first():
    cloud = CloudConfig()
    add_traffic_accounting(cloud, DEV)
    unit = _file(cloud, "/etc/systemd/system/supercluster-traffic-accounting.service")
    assert "Before=network-pre.target shutdown.target kubelet.service" in unit.splitlines()
    assert "DefaultDependencies=no" in unit.splitlines()
    # Wanted by kubelet: starting kubelet pulls the rules in, ordered before it, even on the first boot.
    assert "WantedBy=multi-user.target kubelet.service" in unit.splitlines()
    assert "Type=oneshot" in unit and "RemainAfterExit=true" in unit
    assert ["systemctl", "enable", "--now", "supercluster-traffic-accounting.service"] in cloud.runcmd
    assert "iptables" in cloud.packages


def test_accounting_uses_the_clusters_ranges_not_a_hard_coded_10_slash_8():
    rules = render_restore(accounting_ruleset(DEV))
    assert (
        "-A SUPERCLUSTER-ACCT-IN -s 10.64.0.0/10 -m comment --comment "
        '"iptables-exporter supercluster traffic=cluster-in" -j RETURN' in rules
    )
    assert (
        '-A SUPERCLUSTER-ACCT-OUT -m comment --comment "iptables-exporter supercluster traffic=internet-out"' in rules
    )
    assert "! -s 10.0.0.0/8" not in rules and "! -d 10.0.0.0/8" not in rules
    hooks = {(c.hook, c.table) for c in accounting_ruleset(DEV).chains}
    assert hooks == {("INPUT", "mangle"), ("OUTPUT", "mangle"), ("FORWARD", "mangle")}


def test_nat_host_cloud_init_is_valid_and_forwards():
    text = render(
        nat_host_cloud_config(DEV_CONFIG, DEV, "dev-kv-123456", kubernetes_version=DEV_CONFIG.kubernetes_version)
    )
    assert sysctls()["net.ipv4.ip_forward"] == "1" and "net.ipv4.ip_forward = 1" in text
    assert ["sysctl", "--load", SYSCTL_PATH] in nat_host_cloud_config(
        DEV_CONFIG, DEV, "kv", kubernetes_version=DEV_CONFIG.kubernetes_version
    ).runcmd
    assert str(NAT_HOST_TAINTS[0]) == "supercluster.io/nat-host=true:NoSchedule"
    assert "BEGIN" not in text and "PRIVATE" not in text, "customData never carries a secret"


@pytest.mark.slow  # a real tool in a subprocess, about a second: the slow stage
def test_nat_host_cloud_init_passes_cloud_init_schema(tmp_path):
    cloud_init = require_tool("cloud-init")
    path = tmp_path / "user-data.yaml"
    path.write_text(
        render(
            nat_host_cloud_config(DEV_CONFIG, DEV, "dev-kv-123456", kubernetes_version=DEV_CONFIG.kubernetes_version)
        )
    )
    result = subprocess.run([cloud_init, "schema", "--config-file", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_chains_are_ours_and_hooked_into_real_built_in_chains():
    with pytest.raises(ValueError, match="no built-in chain"):
        Chain("mangle", "SUPERCLUSTER-X", "NOPE", ())
    with pytest.raises(ValueError, match="chain names"):
        Chain("mangle", "KUBE-SERVICES", "INPUT", ())
    with pytest.raises(ValueError, match="quote"):
        Chain("mangle", "SUPERCLUSTER-X", "INPUT", (Rule(comment='say "hi"'),))


def test_every_vnet_gets_a_nat_gateway_sized_for_its_machines():
    prod_config = parsed("prod")
    prod = plan_addresses(prod_config)
    gateways = {g.vnet: g for g in nat_gateways(prod)}
    assert {k: g.public_ips for k, g in gateways.items()} == {
        "system": 2,
        "h100a": 16,
        "h100b": 16,
        "cpu": 16,
        "platform": 16,
    }
    assert "endpoints" not in gateways["system"].subnets
    assert gateways["h100a"].subnets == tuple(s.key for s in prod.vnet("h100a").subnets)
    # 16 IPs x 64,512 ports over 3,000 nodes.
    assert gateways["h100a"].snat_ports // machines_in_vnet(prod_config, prod, "h100a") == 344
    assert machines_in_vnet(prod_config, prod, "system") == 5 + 3 + 5 + 3


def test_the_example_hub_outputs_keep_the_contract_for_both_stacks():
    for stack in ("dev", "prod"):
        raw = raw_config(stack)
        raw["network"]["hub"] = {"stack": "org/hub/prod"}
        network = parse_config(raw, "eastus").network
        hub = parse_hub_outputs(example_hub_outputs(str(network.address_space), str(network.service_cidr)), network)
        assert hub.subscription_id == "22222222-2222-2222-2222-222222222222"
        assert not any(ipaddress.ip_network(r).overlaps(network.address_space) for r in hub.address_space)
