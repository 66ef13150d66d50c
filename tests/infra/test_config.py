"""The config contract, tested without Pulumi: what is accepted, and the one line for what is not."""

from __future__ import annotations

import pytest

from infra.config.cluster_config import parse_config
from infra.config.errors import ConfigError
from tests.helpers import parsed, raw_config


def test_both_stack_files_parse():
    dev, prod = parsed("dev"), parsed("prod")
    assert dev.etcd.members == 1 and prod.etcd.members == 5 and prod.events_etcd.members == 3
    assert prod.control_plane.apiservers == 5
    assert prod.max_nodes_total == 7_500
    assert {p.role for p in prod.node_pools} == {"gpu", "cpu", "system"}
    assert all(p.infiniband for p in prod.node_pools if p.role == "gpu")


@pytest.mark.parametrize("key", ["clusterName", "network", "etcd", "eventsEtcd", "controlPlane", "nodePools"])
def test_missing_required_key_is_named(key):
    raw = raw_config()
    del raw[key]
    with pytest.raises(ConfigError) as caught:
        parse_config(raw, "eastus")
    assert str(caught.value) == (
        f"invalid config supercluster:{key} = <missing>: expected a value (this key is required)"
    )


def test_missing_location_is_named():
    with pytest.raises(ConfigError, match=r"azure-native:location = None: expected an Azure region name"):
        parse_config(raw_config(), None)


def test_hub_needs_exactly_one_of_stack_or_address_space():
    raw = raw_config()
    raw["network"]["hub"] = {"stack": "org/hub/prod", "addressSpace": "10.250.0.0/22"}
    with pytest.raises(ConfigError, match="exactly one of hub.stack"):
        parse_config(raw, "eastus")


def test_duplicate_pool_names_and_slots_are_refused():
    raw = raw_config()
    raw["nodePools"][1]["name"] = raw["nodePools"][0]["name"]
    with pytest.raises(ConfigError, match=r"nodePools\[1\].name = 'gpu'"):
        parse_config(raw, "eastus")
    raw = raw_config()
    raw["nodePools"][1]["addressSlot"] = raw["nodePools"][0]["addressSlot"]
    with pytest.raises(ConfigError, match=r"nodePools\[1\].addressSlot = 1: expected a slot no other pool uses"):
        parse_config(raw, "eastus")


def test_infiniband_needs_an_infiniband_size():
    raw = raw_config()
    raw["nodePools"][1]["infiniband"] = True
    with pytest.raises(ConfigError, match=r"nodePools\[1\].infiniband = True: expected false for Standard_D16ds_v5"):
        parse_config(raw, "eastus")


def test_gpu_pool_needs_a_gpu_size_and_cpu_pool_a_cpu_size():
    raw = raw_config()
    raw["nodePools"][0]["vmSize"] = "Standard_D16ds_v5"
    with pytest.raises(ConfigError, match=r"nodePools\[0\].vmSize = 'Standard_D16ds_v5': expected a GPU size"):
        parse_config(raw, "eastus")


@pytest.mark.parametrize("quota", [1024, 64 * 1024**3])
def test_etcd_quota_bounds(quota):
    raw = raw_config()
    raw["etcd"]["quotaBackendBytes"] = quota
    with pytest.raises(ConfigError, match="etcd.quotaBackendBytes"):
        parse_config(raw, "eastus")


def test_taints_and_labels_are_kubernetes_shaped():
    pool = parsed("dev").node_pools[0]
    assert [str(t) for t in pool.taints] == ["nvidia.com/gpu=present:NoSchedule"]
    raw = raw_config()
    raw["nodePools"][0]["taints"][0]["effect"] = "Sometimes"
    with pytest.raises(ConfigError, match="effect = 'Sometimes': expected one of NoSchedule"):
        parse_config(raw, "eastus")
    raw = raw_config()
    raw["nodePools"][0]["labels"] = {"bad key!": "x"}
    with pytest.raises(ConfigError, match="labels.bad key!"):
        parse_config(raw, "eastus")


@pytest.mark.parametrize("key", ["supercluster.io/role", "supercluster.io/pool", "supercluster.io/infiniband"])
def test_a_pool_label_may_not_override_one_every_node_derives(key):
    raw = raw_config()
    raw["nodePools"][1]["labels"] = {key: "gpu"}
    with pytest.raises(ConfigError, match=rf"nodePools\[1\].labels.{key} = 'gpu': expected a label other than"):
        parse_config(raw, "eastus")


def test_messages_are_one_line_even_for_long_values():
    raw = raw_config()
    raw["clusterName"] = "x" * 500 + "\nsecond line"
    with pytest.raises(ConfigError) as caught:
        parse_config(raw, "eastus")
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 400
