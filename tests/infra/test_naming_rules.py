"""Every Azure name the program derives obeys Azure's naming rule for its resource type
(infra/config/naming.py NAME_RULES), and a cluster name that would break one stops validation with one line."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infra.catalog.image_refs import CACHE_PREFIXES
from infra.config import naming
from infra.config.cluster_config import CLUSTER_NAME_PATTERN, POOL_NAME_PATTERN
from infra.config.errors import ConfigError
from tests.helpers import parsed

# One name each rule refuses, and what the one-line message says about it.
REFUSED = {
    "resource group": ("dev-rg.", "is not letters, digits, '_', '(', ')', '-' and '.', not ending with '.'"),
    "key vault": ("a--b-kv-123456", "no consecutive hyphens"),
    "storage account": ("Dev-etcdbk", "is not lowercase letters and digits"),
    "container registry": ("devacr" * 9, "is 54 characters, Microsoft.ContainerRegistry/registries takes 5-50"),
    "registry cache rule": ("k8s", "is 3 characters, Microsoft.ContainerRegistry/registries/cacheRules takes 5-50"),
    "key vault secret": ("cluster_ca", "is not letters, digits and '-'"),
    "blob container": ("events--etcd", "no consecutive hyphens"),
    "managed identity": ("-dev-id-node", "starting with a letter or digit"),
    "virtual network": ("dev-pool-vnet-", "ending with one or '_'"),
    "network resource": ("x" * 81, "is 81 characters"),
    "virtual machine": ("dev-etcd-0.", "not ending with '.' or '-'"),
    "scale set": ("dev@gpu-s000", "no \\/\"'[]:|<>+=;,?*@& or space"),
    "computer name prefix": ("g" * 59, "is 59 characters"),
    "compute gallery": ("dev_images", "is not letters, digits and '.'"),
    "gallery image": ("dev-cpu-", "starting and ending with a letter or digit"),
    "image template": ("dev-cpu-1.0.0" + "0" * 52, "is 65 characters"),
}


def test_every_rule_has_a_refused_example_and_a_source():
    assert set(REFUSED) == set(naming.NAME_RULES)
    for rule in naming.NAME_RULES.values():
        assert rule.source.startswith("https://learn.microsoft.com/"), rule


@pytest.mark.parametrize("key", sorted(naming.NAME_RULES))
def test_each_rule_refuses_with_one_line(key):
    name, says = REFUSED[key]
    problem = naming.NAME_RULES[key].problem(name)
    assert problem is not None and says in problem and "\n" not in problem, problem


def test_the_names_dev_and_prod_derive_are_valid():
    for stack in ("dev", "prod"):
        config = parsed(stack)
        for key, name, rule in naming.derived_names(config.cluster_name, [p.name for p in config.node_pools]):
            assert naming.NAME_RULES[rule].problem(name) is None, (key, name)


def test_every_cache_rule_name_is_valid():
    for prefix in CACHE_PREFIXES.values():
        assert naming.NAME_RULES["registry cache rule"].problem(naming.cache_rule(prefix)) is None
    assert naming.cache_rule("k8s") == "k8s-cache"


def test_a_cluster_name_with_consecutive_hyphens_stops_validation_with_one_line():
    with pytest.raises(ConfigError) as refused:
        parsed("dev", clusterName="a--b")
    message = str(refused.value)
    assert message.startswith("invalid config supercluster:clusterName = 'a--b': expected ")
    assert "key vault name 'a--b-kv-" in message and "no consecutive hyphens" in message
    assert "resource-name-rules#microsoftkeyvault" in message and "\n" not in message


def test_truncation_never_leaves_a_hyphen_against_the_vault_suffix():
    name = "abcdefghijklm-nopqrs"  # the 14th character is a hyphen
    assert naming.key_vault(name).startswith("abcdefghijklm-kv-")
    assert naming.NAME_RULES["key vault"].problem(naming.key_vault(name)) is None


@settings(max_examples=300, deadline=None)
@given(
    cluster=st.from_regex(rf"\A{CLUSTER_NAME_PATTERN}\Z"),
    pools=st.lists(st.from_regex(rf"\A{POOL_NAME_PATTERN}\Z"), min_size=1, max_size=3, unique=True),
)
def test_every_accepted_cluster_name_gives_only_valid_azure_names(cluster, pools):
    """Of the names the config's pattern admits, only some with consecutive hyphens are refused
    (Key Vault's rule: a pair the vault name's truncation cuts off does no harm, e.g. 'a00000000000--0');
    for every accepted one, truncation included, each derived name is valid."""
    try:
        naming.check_derived_names(cluster, pools)
    except ConfigError as refused:
        assert "--" in cluster and "clusterName" in str(refused), str(refused)
        return
    for key, name, rule in naming.derived_names(cluster, pools):
        assert naming.NAME_RULES[rule].problem(name) is None, (key, name)
        assert re.fullmatch(naming.NAME_RULES[rule].pattern, name)
