"""Turning an add-on off removes exactly its objects; settings are validated before any resource."""

from __future__ import annotations

import dataclasses

import pytest

from infra.addons import ADDONS, BASE, CONFIG_KEY, MODULES, AddonSettings
from infra.config.cluster_config import ADDON_KEYS
from infra.config.errors import ConfigError
from tests.infra.addon_fixtures import all_objects, groups_for, keys, spec_for

# Add-ons whose absence another add-on's validation refuses, switched off together.
REQUIRES = {"coredns": {"nodeLocalDns": {"enabled": False}}, "clusterAutoscaler": {"balloons": {"enabled": False}}}
HEADROOM = {"balloons": {"headroomNodes": {"cpu": 1}}}


def _cpu_only_stack() -> dict:
    from tests.helpers import raw_config

    return {"nodePools": [p for p in raw_config("dev")["nodePools"] if p["role"] != "gpu"]}


@pytest.mark.parametrize("attr", MODULES)
def test_disabling_an_addon_removes_exactly_its_objects(attr):
    key = CONFIG_KEY[attr]
    # gpuHealthCheck may only be off without GPU pools; the other add-ons use the dev stack as is.
    changes = _cpu_only_stack() if key == "gpuHealthCheck" else {}
    everything = groups_for("dev", addons=dict(HEADROOM), **changes)
    off = {**HEADROOM, **REQUIRES.get(key, {}), key: {**HEADROOM.get(key, {}), "enabled": False}}
    without = groups_for("dev", addons=off, **changes)
    removed_together = {CONFIG_KEY_TO_ATTR[k] for k in REQUIRES.get(key, {})}
    expected = keys(everything[attr]).union(*(keys(everything[a]) for a in removed_together))
    assert keys(all_objects(everything)) - keys(all_objects(without)) == expected
    assert keys(all_objects(without)) <= keys(all_objects(everything))
    assert attr not in without
    # Everything left is byte-for-byte what it was.
    for group, objects in without.items():
        assert objects == everything[group], group


CONFIG_KEY_TO_ATTR = {key: attr for attr, key in CONFIG_KEY.items()}


def test_the_addon_table_is_the_config_keys_and_the_settings_in_one_order():
    """The config layer sits below the add-ons, so it keeps its own list of keys: the table must match it,
    key for key and in order, and every row must have its typed settings."""
    assert [(addon.key, addon.attr) for addon in ADDONS] == list(ADDON_KEYS.items())
    assert [field.name for field in dataclasses.fields(AddonSettings)] == [addon.attr for addon in ADDONS]


def test_base_is_rendered_with_every_addon_off():
    off = {key: {"enabled": False} for key in CONFIG_KEY.values() if key != "gpuHealthCheck"}
    groups = groups_for("dev", addons=off)
    assert set(groups) == {BASE, "gpu_health_check"}
    assert {o["metadata"]["name"] for o in groups[BASE] if o["kind"] == "PriorityClass"} == {
        "supercluster-system",
        "supercluster-workloads",
    }


def test_balloons_need_the_autoscaler():
    with pytest.raises(ConfigError, match=r"addons.balloons.enabled = True"):
        spec_for("dev", addons={"clusterAutoscaler": {"enabled": False}})


@pytest.mark.parametrize(
    "addons,key",
    [
        ({"balloons": {"headroomNodes": {"nope": 1}}}, "addons.balloons.headroomNodes.nope = 1"),
        ({"balloons": {"headroomNodes": {"cpu": 4}}}, "addons.balloons.headroomNodes.cpu = 4"),
        ({"balloons": {"headroom": 1}}, "addons.balloons.headroom = 1"),
        ({"nvidiaDevicePlugin": {"version": "0.17"}}, "addons.nvidiaDevicePlugin.version"),
        ({"gpuHealthCheck": {"intervalSeconds": 5}}, "addons.gpuHealthCheck.intervalSeconds = 5"),
        ({"trafficAccounting": {"port": 80}}, "addons.trafficAccounting.port = 80"),
        ({"monitoring": {"retention": "forever"}}, "addons.monitoring.retention = 'forever'"),
        ({"monitoring": {"enabled": False, "storageGiB": 1}}, "addons.monitoring.storageGiB = 1"),
    ],
)
def test_every_addon_setting_is_validated_strictly(addons, key):
    with pytest.raises(ConfigError) as caught:
        spec_for("dev", addons=addons)
    assert key in str(caught.value)


def test_balloons_hold_one_node_each_of_their_pool():
    groups = groups_for("prod", addons={"balloons": {"headroomNodes": {"h100a": 4, "cpu": 10}}})
    deployments = {o["metadata"]["name"]: o for o in groups["balloons"] if o["kind"] == "Deployment"}
    assert set(deployments) == {"balloon-h100a", "balloon-cpu"}
    gpu = deployments["balloon-h100a"]
    assert gpu["spec"]["replicas"] == 4
    pod = gpu["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "supercluster-balloons"
    assert pod["nodeSelector"] == {"supercluster.io/pool": "h100a"}
    assert pod["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == 8
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}
    ]
    (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["labelSelector"]["matchLabels"] == {"app.kubernetes.io/name": "balloon-h100a"}
    cpu = deployments["balloon-cpu"]["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
    assert cpu["cpu"] == "32"  # half of a Standard_D64ds_v5
    assert gpu["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"
