"""kube-scheduler: a valid kubescheduler.config.k8s.io/v1 file that bin-packs, plus a gang profile."""

from __future__ import annotations

import re

import jsonschema
import pytest

from infra.catalog.versions import SCHEDULER_PLUGINS_BY_KUBERNETES_MINOR
from infra.config.cluster_config import KUBERNETES_VERSION_PATTERN
from infra.control_plane import machine_identity, paths, scheduler
from tests.helpers import load_yaml
from tests.infra.control_plane_files import component_flags, files, machines


def _object(properties: dict, required: tuple[str, ...] = ()) -> dict:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


_PLUGIN_NAMES = [
    "*",
    "PrioritySort",
    "NodeResourcesFit",
    "NodeResourcesBalancedAllocation",
    "PodTopologySpread",
    "InterPodAffinity",
    "TaintToleration",
    "NodeAffinity",
    "ImageLocality",
    "DefaultPreemption",
    "Coscheduling",  # registered by the scheduler-plugins build
]
_PLUGIN_SET = _object(
    {
        "enabled": {
            "type": "array",
            "items": _object({"name": {"enum": _PLUGIN_NAMES}, "weight": {"type": "integer", "minimum": 1}}, ("name",)),
        },
        "disabled": {"type": "array", "items": _object({"name": {"enum": _PLUGIN_NAMES}}, ("name",))},
    }
)
_RESOURCE = _object(
    {"name": {"type": "string"}, "weight": {"type": "integer", "minimum": 1, "maximum": 100}}, ("name",)
)
_ARGS = {
    "NodeResourcesFit": _object(
        {
            "ignoredResources": {"type": "array"},
            "ignoredResourceGroups": {"type": "array"},
            "scoringStrategy": _object(
                {
                    "type": {"enum": ["LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"]},
                    "resources": {"type": "array", "items": _RESOURCE},
                    "requestedToCapacityRatio": {"type": "object"},
                }
            ),
        }
    ),
    "PodTopologySpread": _object(
        {"defaultConstraints": {"type": "array"}, "defaultingType": {"enum": ["System", "List"]}}
    ),
    "Coscheduling": _object(
        {
            "permitWaitingTimeSeconds": {"type": "integer", "minimum": 0},
            "podGroupBackoffSeconds": {"type": "integer", "minimum": 0},
        }
    ),
}
# Field names of kubescheduler.config.k8s.io/v1 (kubernetes.io "kube-scheduler Configuration (v1)")
# and of scheduler-plugins' CoschedulingArgs (apis/config/v1). kube-scheduler decodes its config
# strictly, so an unknown or misspelt field is an error at start-up; so it is here.
SCHEMA = _object(
    {
        "apiVersion": {"const": "kubescheduler.config.k8s.io/v1"},
        "kind": {"const": "KubeSchedulerConfiguration"},
        "parallelism": {"type": "integer"},
        "leaderElection": _object(
            {
                k: {}
                for k in (
                    "leaderElect",
                    "leaseDuration",
                    "renewDeadline",
                    "retryPeriod",
                    "resourceLock",
                    "resourceName",
                    "resourceNamespace",
                )
            }
        ),
        "clientConnection": _object(
            {
                "kubeconfig": {"type": "string"},
                "acceptContentTypes": {"type": "string"},
                "contentType": {"type": "string"},
                "qps": {"type": "number"},
                "burst": {"type": "integer"},
            }
        ),
        "enableProfiling": {"type": "boolean"},
        "enableContentionProfiling": {"type": "boolean"},
        "percentageOfNodesToScore": {"type": "integer", "minimum": 0, "maximum": 100},
        "podInitialBackoffSeconds": {"type": "integer"},
        "podMaxBackoffSeconds": {"type": "integer"},
        "delayCacheUntilActive": {"type": "boolean"},
        "extenders": {"type": "array"},
        "profiles": {
            "type": "array",
            "minItems": 1,
            "items": _object(
                {
                    "schedulerName": {"type": "string"},
                    "percentageOfNodesToScore": {"type": "integer"},
                    "plugins": _object(
                        {
                            point: _PLUGIN_SET
                            for point in (
                                "preEnqueue",
                                "queueSort",
                                "preFilter",
                                "filter",
                                "postFilter",
                                "preScore",
                                "score",
                                "reserve",
                                "permit",
                                "preBind",
                                "bind",
                                "postBind",
                                "multiPoint",
                            )
                        }
                    ),
                    "pluginConfig": {
                        "type": "array",
                        "items": {
                            "oneOf": [
                                _object({"name": {"const": name}, "args": args}, ("name", "args"))
                                for name, args in _ARGS.items()
                            ]
                        },
                    },
                },
                ("schedulerName",),
            ),
        },
    },
    ("apiVersion", "kind", "profiles"),
)


@pytest.fixture(scope="module")
def rendered() -> dict:
    machine = machines("prod")[0]
    flags = component_flags(machine, paths.SCHEDULER_UNIT)
    return load_yaml(files(machine)[flags["config"]])


def test_scheduler_config_is_valid_v1(rendered):
    jsonschema.validate(rendered, SCHEMA)


def test_schema_rejects_a_misspelt_field(rendered):
    broken = {**rendered, "percentageOfNodesToScor": 50}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, SCHEMA)


def _profile(config: dict, name: str) -> dict:
    (profile,) = [p for p in config["profiles"] if p["schedulerName"] == name]
    return profile


def _args(profile: dict, plugin: str) -> dict:
    (args,) = [c["args"] for c in profile["pluginConfig"] if c["name"] == plugin]
    return args


@pytest.mark.parametrize("profile_name", [scheduler.DEFAULT_PROFILE, scheduler.GANG_PROFILE])
def test_both_profiles_bin_pack_weighting_gpus(rendered, profile_name):
    strategy = _args(_profile(rendered, profile_name), "NodeResourcesFit")["scoringStrategy"]
    assert strategy["type"] == "MostAllocated"
    weights = {r["name"]: r["weight"] for r in strategy["resources"]}
    assert weights["nvidia.com/gpu"] > max(weights["cpu"], weights["memory"])
    plugins = _profile(rendered, profile_name)["plugins"]
    assert {"name": "NodeResourcesBalancedAllocation"} in plugins["score"]["disabled"]
    assert _args(_profile(rendered, profile_name), "PodTopologySpread") == {"defaultingType": "List"}


def test_only_the_gang_profile_runs_coscheduling(rendered):
    gang = _profile(rendered, scheduler.GANG_PROFILE)["plugins"]
    default = _profile(rendered, scheduler.DEFAULT_PROFILE)["plugins"]
    assert {"name": "Coscheduling"} in gang["multiPoint"]["enabled"]
    assert "multiPoint" not in default


def test_profiles_share_queue_sort_and_its_args(rendered):
    """kube-scheduler refuses profiles whose queueSort plugin or its args differ."""
    default, gang = (_profile(rendered, n) for n in (scheduler.DEFAULT_PROFILE, scheduler.GANG_PROFILE))
    assert default["plugins"]["queueSort"] == gang["plugins"]["queueSort"]
    assert default["plugins"]["queueSort"]["enabled"] == [{"name": "Coscheduling"}]
    assert _args(default, "Coscheduling") == _args(gang, "Coscheduling")


def test_whole_cluster_is_scored_and_leader_elected(rendered):
    assert rendered["percentageOfNodesToScore"] == 100
    assert rendered["leaderElection"]["leaderElect"] is True
    assert rendered["enableProfiling"] is False
    assert rendered["clientConnection"]["kubeconfig"] == paths.SCHEDULER_KUBECONFIG


def test_scheduler_serves_on_its_vm_address_with_its_config_and_delegates_authn_and_authz():
    """Without the two delegation kubeconfigs the scheduler's /metrics refuses every caller (403);
    bound to loopback no Prometheus reaches it. tests/e2e/test_dev_cluster.py proves Prometheus's
    token is answered at the VM's address."""
    for machine in machines("prod"):
        flags = component_flags(machine, paths.SCHEDULER_UNIT)
        assert flags == {
            "authentication-kubeconfig": paths.SCHEDULER_KUBECONFIG,
            "authorization-kubeconfig": paths.SCHEDULER_KUBECONFIG,
            # The VM's own private address, read from IMDS at boot: not 0.0.0.0, not 127.0.0.1.
            "bind-address": machine_identity.ADDRESS,
            "config": paths.SCHEDULER_CONFIG,
        }


def test_every_supported_kubernetes_minor_has_a_digest_pinned_scheduler():
    low, high = re.search(r"3\[(\d)-(\d)\]", KUBERNETES_VERSION_PATTERN).groups()  # 1.31 .. 1.34
    supported = {f"1.3{n}" for n in range(int(low), int(high) + 1)}
    assert set(SCHEDULER_PLUGINS_BY_KUBERNETES_MINOR) == supported
    for minor, (tag, digest) in SCHEDULER_PLUGINS_BY_KUBERNETES_MINOR.items():
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest)
        tag_minor = int(tag.split(".")[1])
        # Same minor, or one older (kube-scheduler may lag kube-apiserver by one minor version).
        assert int(minor.split(".")[1]) - tag_minor in (0, 1), (minor, tag)
