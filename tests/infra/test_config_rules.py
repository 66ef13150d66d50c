"""Each rule that stops a config Azure or Kubernetes would refuse later, with its one-line message."""

from __future__ import annotations

import base64
import struct

import pytest

from infra.assembly.desired_cluster import assemble
from infra.catalog import versions
from infra.cluster.cluster_spec import build_cluster_spec
from infra.cluster.node_checks import daemon_pods, host_ports
from infra.config.errors import ConfigError
from infra.config.value_checks import AZURE_REGIONS, PRIVATE_RANGES, check_ssh_public_key
from infra.facts.labels import ROLE_SYSTEM, SYSTEM_TAINT_KEY
from tests.helpers import pool_node_spec, raw_config


def refused(raw, location="eastus") -> str:
    with pytest.raises(ConfigError) as caught:
        assemble(raw, location)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("invalid config "), message
    return message


def with_network(**changes):
    raw = raw_config("dev")
    raw["network"].update(changes)
    return raw


# ------------------------------------------------------------------ addresses


@pytest.mark.parametrize(
    "space,touches",
    [
        ("127.0.0.0/8", "loopback"),
        ("0.0.0.0/8", "'this network'"),
        ("240.0.0.0/4", "class E"),
        ("224.0.0.0/4", "multicast"),
        ("169.254.0.0/16", "link-local"),
        ("0.0.0.0/0", "link-local"),
        ("100.64.0.0/10", "public or shared"),
        ("8.0.0.0/8", "public or shared"),
        ("11.0.0.0/8", "public or shared"),
        ("172.0.0.0/8", "public or shared"),
    ],
)
def test_address_space_must_be_rfc_1918(space, touches):
    message = refused(with_network(addressSpace=space))
    assert f"network.addressSpace = '{space}': expected a private RFC 1918 range" in message and touches in message


@pytest.mark.parametrize(
    "cidr,touches",
    [
        ("169.254.0.0/16", "Azure's instance metadata service"),
        ("168.63.128.0/22", "168.63.129.16"),
        ("127.0.0.0/16", "loopback"),
        ("224.0.0.0/16", "multicast"),
        ("240.0.0.0/16", "class E"),
        ("100.64.0.0/16", "public or shared"),
        ("20.0.0.0/16", "public or shared"),
        ("0.0.0.0/0", "link-local"),
    ],
)
def test_service_range_must_be_private_and_clear_of_azure_and_reserved_ranges(cidr, touches):
    message = refused(with_network(serviceCidr=cidr))
    assert f"network.serviceCidr = '{cidr}': expected a private RFC 1918 range" in message and touches in message


def test_hub_range_must_be_private_and_0_0_0_0_0_does_not_crash():
    raw = raw_config("dev")
    raw["network"]["hub"] = {"addressSpace": "0.0.0.0/0"}
    assert "network.hub.addressSpace = '0.0.0.0/0': expected a private RFC 1918 range" in refused(raw)


def test_the_stack_files_use_rfc_1918_ranges():
    for stack in ("dev", "prod"):
        network = raw_config(stack)["network"]
        import ipaddress

        for cidr in (network["addressSpace"], network["serviceCidr"]):
            assert any(ipaddress.IPv4Network(cidr).subnet_of(block) for block in PRIVATE_RANGES)


@pytest.mark.parametrize("ip", ["169.254.169.254", "169.254.0.10", "169.254.255.1", "10.0.0.10", "169.254.20"])
def test_node_local_dns_address_is_a_usable_link_local_host(ip):
    raw = raw_config("dev")
    raw["addons"]["nodeLocalDns"] = {"localIp": ip}
    assert f"addons.nodeLocalDns.localIp = '{ip}': expected a usable link-local IPv4 host address" in refused(raw)


# ------------------------------------------------------------------ ports and the pod budget


@pytest.mark.parametrize(
    "port,other",
    [
        (10250, "kubelet"),
        (10248, "kubelet"),
        (10256, "kube-proxy"),
        (10249, "kube-proxy"),
        (9253, "addons.nodeLocalDns (node-local-dns)"),
        (8080, "addons.nodeLocalDns (node-local-dns)"),
    ],
)
def test_an_add_on_host_port_may_not_clash(port, other):
    raw = raw_config("dev")
    raw["addons"]["trafficAccounting"] = {"port": port}
    assert refused(raw).endswith(
        f"addons.trafficAccounting.port = {port}: expected a host port no other node "
        f"service binds ({port} is also {other}'s)"
    )


def test_host_ports_come_from_what_the_nodes_and_add_ons_render():
    from infra.cluster.node_checks import _daemonsets

    cluster = assemble(raw_config("dev"), "eastus")
    spec = cluster.spec
    pool = spec.config.node_pools[1]
    node = pool_node_spec(spec, pool)
    used = host_ports(node, list(_daemonsets(cluster.addons)))
    assert used[10250] == ["kubelet"] and used[10256] == ["kube-proxy"]
    assert used[9119] == ["addons.trafficAccounting (iptables-exporter)"]
    assert used[9253] == ["addons.nodeLocalDns (node-local-dns)"]


def test_pod_budget_counts_the_daemonsets_each_pool_kind_runs():
    from infra.cluster.node_checks import _daemonsets

    cluster = assemble(raw_config("dev"), "eastus")
    spec = cluster.spec
    pools = {p.name: pool_node_spec(spec, p) for p in spec.config.node_pools}
    daemonsets = list(_daemonsets(cluster.addons))
    assert "nvidia-device-plugin" in daemon_pods(pools["gpu"], daemonsets)
    assert "nvidia-device-plugin" not in daemon_pods(pools["cpu"], daemonsets)
    assert len(daemon_pods(pools["gpu"], daemonsets)) > len(daemon_pods(pools["cpu"], daemonsets))


def test_pod_ips_per_node_must_fit_one_pod_per_gpu_beside_the_daemon_sets_that_take_an_ip():
    """A researcher's 8 one-GPU pods on an 8-GPU node: the pod IPs cover them and the DaemonSet pods that
    take a pod IP; host-network DaemonSet pods take none (they count against maxPods only)."""
    raw = raw_config("dev")
    raw["nodePools"][0]["podIpsPerNode"] = 9
    message = refused(raw)
    assert "nodePools[0].podIpsPerNode = 9: expected at least 10: every gpu node runs 2 DaemonSet pod(s)" in message
    assert "(nvidia-device-plugin, gpu-health-check-gpu) and 8 workload pod(s) (one per GPU)" in message
    raw["nodePools"][0]["podIpsPerNode"] = 10
    assemble(raw, "eastus")


# ------------------------------------------------------------------ keys, versions, regions, durations

RSA_1024 = b"\x00" + b"\xff" * 128
E65537 = (65537).to_bytes(3, "big")


def _blob(*parts: bytes) -> str:
    return base64.b64encode(b"".join(struct.pack(">I", len(p)) + p for p in parts)).decode()


@pytest.mark.parametrize(
    "key,why",
    [
        ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDevOnlyKeyReplaceWithYourOwnKeyDevOnlyKey0 x", "not a base64 SSH key"),
        ("ssh-ed25519 not-base64!", "not a base64 SSH key"),
        (f"ssh-ed25519 {_blob(b'ssh-ed25519', bytes(31))} x", "holds 32 bytes"),
        (f"ssh-ed25519 {_blob(b'ssh-rsa', E65537, bytes(256))} x", "does not encode a ssh-ed25519 key"),
        (f"ssh-rsa {_blob(b'ssh-rsa', E65537, RSA_1024)} x", "this RSA key has 1024 bits"),
        (f"ecdsa-sha2-nistp256 {_blob(b'ecdsa-sha2-nistp256')} x", "Azure takes no other type"),
        ("ssh-ed25519", "Azure takes no other type"),
        ("ssh-ed25519 AAAA\nsecond-line", "Azure takes no other type"),
    ],
)
def test_ssh_public_key_is_decoded_and_checked(key, why):
    with pytest.raises(ConfigError) as caught:
        check_ssh_public_key("adminSshPublicKey", key)
    assert why in str(caught.value) and "\n" not in str(caught.value)


def test_a_real_rsa_key_of_2048_bits_is_accepted():
    modulus = b"\x00" + b"\xc1" * 256  # 2048 significant bits
    check_ssh_public_key("adminSshPublicKey", f"ssh-rsa {_blob(b'ssh-rsa', E65537, modulus)} me@host")


@pytest.mark.parametrize("version", ["1.33.99", "1.33.04", "1.30.1", "1.35.0", "1.33", "v1.33.4", "1.34.2"])
def test_kubernetes_version_must_be_a_pinned_release(version):
    message = refused({**raw_config("dev"), "kubernetesVersion": version})
    assert f"kubernetesVersion = '{version}': expected a Kubernetes release the project pins: 1.31.0-1.31.13" in message


def test_every_pinned_minor_has_its_scheduler_and_the_stacks_pin_a_release():
    assert set(versions.KUBERNETES_NEWEST_PATCH) == set(versions.SCHEDULER_PLUGINS_BY_KUBERNETES_MINOR)
    for stack in ("dev", "prod"):
        build_cluster_spec(raw_config(stack), "eastus")


@pytest.mark.parametrize("location", ["East US", "eastus9", "unitedstates", "", None, 3])
def test_location_must_be_an_azure_region(location):
    assert "azure-native:location = " in refused(raw_config("dev"), location)
    assert "westeurope" in AZURE_REGIONS and "eastus" in AZURE_REGIONS


@pytest.mark.parametrize(
    "addon,key,value",
    [
        ("clusterAutoscaler", "scaleDownUnneededTime", "2562048h"),
        ("monitoring", "retention", "15251w"),
        ("monitoring", "retention", "106752d"),
    ],
)
def test_durations_fit_gos_time_duration(addon, key, value):
    raw = raw_config("dev")
    raw["addons"][addon] = {key: value}
    assert refused(raw).endswith(
        f"addons.{addon}.{key} = '{value}': expected a duration Go's time.Duration holds (at most 2562047h)"
    )
    raw["addons"][addon] = {key: "2562047h" if key != "retention" else "15250w"}
    build_cluster_spec(raw, "eastus")


def test_the_autoscaler_and_monitoring_need_a_system_pool_and_it_is_tainted():
    """The autoscaler's identity and monitoring live only on the system pools: a config without one stops with
    one line; a system pool always carries the system taint, which no pool may configure by hand."""
    raw = raw_config("dev")
    pools = [pool for pool in raw["nodePools"] if pool["role"] != ROLE_SYSTEM]
    assert "expected a pool with role system" in refused({**raw, "nodePools": pools})
    [system] = [pool for pool in build_cluster_spec(raw, "eastus").config.node_pools if pool.role == ROLE_SYSTEM]
    assert [t.key for t in system.taints] == [SYSTEM_TAINT_KEY]
    tainted = {**pools[1], "taints": [{"key": SYSTEM_TAINT_KEY, "value": "true", "effect": "NoSchedule"}]}
    message = refused({**raw, "nodePools": [pools[0], tainted, *raw["nodePools"][2:]]})
    assert "nodePools[1].taints[0].key" in message
