"""A NAT host is a tainted cluster node: the node bootstrap plus the NAT parts, ordered before kubelet."""

from __future__ import annotations

from infra.boot.cloudinit import render
from infra.config import naming
from infra.nat_hosts import NAT_HOST_MAX_PODS, NAT_HOST_TAINTS, nat_host_cloud_config
from infra.network.addressing import plan_addresses
from infra.network.traffic_counters import boot_steps
from infra.node import kube_proxy, kubelet
from plan.artifacts import file_content
from tests.helpers import load_yaml, parsed


def _files(config) -> dict[str, str]:
    document = load_yaml(
        render(
            nat_host_cloud_config(
                config, plan_addresses(config), "dev-kv", kubernetes_version=config.kubernetes_version
            )
        )
    )
    return {entry["path"]: file_content(entry) for entry in document["write_files"]}


def test_nat_host_joins_tainted_with_kube_proxy_and_its_own_identity():
    files = _files(parsed("dev"))
    kubelet_config = load_yaml(files[kubelet.CONFIG_PATH])
    assert kubelet_config["registerWithTaints"] == [
        {"key": t.key, "value": t.value, "effect": t.effect} for t in NAT_HOST_TAINTS
    ]
    assert kubelet_config["maxPods"] == NAT_HOST_MAX_PODS
    assert "/etc/systemd/system/kube-proxy.service" in files
    assert files["/etc/supercluster/identity"].strip() == naming.role_identity_below_subscription("dev", "nat")
    assert any("SUPERCLUSTER-NAT-FWD" in text for text in files.values())


def test_nat_host_masquerades_hub_traffic_to_services_by_kube_proxys_own_rule():
    """The NAT host adds no translation: its kube-proxy masquerades traffic to a ClusterIP from outside
    ``clusterCIDR`` (the cluster's address space), so the pod's reply returns through the host
    (tests/e2e/test_researcher_access.py shows it on the real binaries)."""
    config = parsed("dev")
    files = _files(config)
    proxy = load_yaml(files[kube_proxy.CONFIG_PATH])
    assert proxy["detectLocalMode"] == "ClusterCIDR"
    assert proxy["clusterCIDR"] == str(config.network.address_space)
    assert not any("MASQUERADE" in text for text in files.values() if "SUPERCLUSTER-NAT" in text)


def test_nat_host_accounting_follows_the_addon_toggle():
    on = _files(parsed("dev"))
    off = _files(parsed("dev", addons={"trafficAccounting": {"enabled": False}}))
    unit = "/etc/systemd/system/supercluster-traffic-accounting.service"
    assert unit in on and unit not in off
    assert (
        boot_steps(parsed("dev", addons={"trafficAccounting": {"enabled": False}}), plan_addresses(parsed("dev"))) == []
    )
