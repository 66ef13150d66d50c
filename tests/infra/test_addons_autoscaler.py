"""cluster-autoscaler: the guard flags, Azure pacing, and the scale-set tags it discovers pools by."""

from __future__ import annotations

import pytest

from infra.addons import balloons, cluster_autoscaler
from infra.config.errors import ConfigError
from infra.config.sizing import shards
from infra.facts.labels import CLOUD_IDENTITY_UID, GPU_STARTUP_TAINT_KEY, ROLE_LABEL, ROLE_SYSTEM, SYSTEM_TAINT_KEY
from infra.node.pool import encode_tag_key, scale_set_tags
from tests.infra.addon_fixtures import AZURE, find, groups_for, spec_for


def _flags(stack="prod", addons=None) -> dict[str, str]:
    container = find(groups_for(stack, addons), "Deployment", "cluster-autoscaler")["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert container["command"][0] == "/cluster-autoscaler"
    return dict(flag.removeprefix("--").split("=", 1) for flag in container["command"][1:])


def _env(stack="prod") -> dict[str, str]:
    container = find(groups_for(stack), "Deployment", "cluster-autoscaler")["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"]}


def test_unready_guards_stop_the_autoscaler_before_half_the_cluster():
    flags = _flags()
    assert 0 < int(flags["max-total-unready-percentage"]) < 50
    assert int(flags["ok-total-unready-count"]) >= 0
    assert flags["scale-down-unready-enabled"] == "false"


def test_scale_down_is_bounded_and_paced():
    flags = _flags()
    assert int(flags["max-scale-down-parallelism"]) in range(1, 11)
    assert flags["max-drain-parallelism"] == "1"
    for flag in (
        "scale-down-unneeded-time",
        "scale-down-delay-after-add",
        "scale-down-delay-after-delete",
        "scale-down-delay-after-failure",
        "max-node-provision-time",
    ):
        assert flags[flag][-1] in "smh" and int(flags[flag][:-1]) > 0, flag


def test_max_nodes_total_comes_from_the_node_pools():
    assert _flags("prod")["max-nodes-total"] == str(spec_for("prod").config.max_nodes_total) == "7500"
    assert _flags("dev")["max-nodes-total"] == str(sum(p.max_nodes for p in spec_for("dev").config.node_pools))


def test_pools_are_discovered_by_tags_and_balanced_by_pool():
    flags = _flags()
    assert flags["node-group-auto-discovery"] == "label:cluster-autoscaler-enabled=true,cluster-autoscaler-name=prod"
    assert flags["balancing-label"] == "supercluster.io/pool"
    assert flags["startup-taint"] == GPU_STARTUP_TAINT_KEY


def test_balloons_sit_exactly_on_the_expendable_cutoff():
    """Pods *below* the cutoff never trigger a scale-up; balloons must still do."""
    assert int(_flags()["expendable-pods-priority-cutoff"]) == balloons.BALLOON_PRIORITY_VALUE
    priority = find(groups_for("prod"), "PriorityClass", "supercluster-balloons")
    assert priority["value"] == balloons.BALLOON_PRIORITY_VALUE and priority["preemptionPolicy"] == "Never"


def test_azure_api_is_rate_limited_cached_and_reached_with_a_managed_identity():
    env = _env()
    assert env["CLOUD_PROVIDER_RATE_LIMIT"] == "true" and env["ENABLE_BACKOFF"] == "true"
    assert int(env["RATE_LIMIT_READ_QPS"]) <= cluster_autoscaler.ARM_READ_QPS
    assert int(env["RATE_LIMIT_WRITE_QPS"]) <= cluster_autoscaler.ARM_WRITE_QPS
    assert int(env["AZURE_VMSS_CACHE_TTL"]) >= 60
    assert env["ARM_USE_MANAGED_IDENTITY_EXTENSION"] == "true"
    assert env["ARM_USER_ASSIGNED_IDENTITY_ID"] == AZURE.identity_client_id
    assert env["ARM_VM_TYPE"] == "vmss"
    assert not any("SECRET" in name for name in env)


def test_autoscaler_pod_stays_put_and_reaches_imds_from_the_host():
    """On the tainted system pools only, as the one non-root user those nodes let reach IMDS."""
    deployment = find(groups_for(), "Deployment", "cluster-autoscaler")
    template = deployment["spec"]["template"]
    assert template["metadata"]["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false"
    assert template["spec"]["hostNetwork"] is True
    assert template["spec"]["nodeSelector"] == {ROLE_LABEL: ROLE_SYSTEM}
    assert template["spec"]["tolerations"] == [
        {"key": SYSTEM_TAINT_KEY, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    ]
    [container] = template["spec"]["containers"]
    assert container["securityContext"]["runAsUser"] == CLOUD_IDENTITY_UID


def test_image_follows_the_kubernetes_minor():
    image = find(groups_for("dev"), "Deployment", "cluster-autoscaler")["spec"]["template"]["spec"]["containers"][0][
        "image"
    ]
    assert image.split("/", 1)[1].startswith("k8s/autoscaling/cluster-autoscaler:v1.33.")


@pytest.mark.parametrize("value", [50, 75, 0])
def test_unready_percentage_of_half_or_more_is_refused(value):
    with pytest.raises(ConfigError, match=rf"addons.clusterAutoscaler.maxTotalUnreadyPercentage = {value}"):
        spec_for("dev", addons={"clusterAutoscaler": {"maxTotalUnreadyPercentage": value}})


@pytest.mark.parametrize(
    "settings,key",
    [
        ({"maxNodeProvisionTime": "15 minutes"}, "addons.clusterAutoscaler.maxNodeProvisionTime"),
        ({"maxNodeProvisionTime": "2h"}, "addons.clusterAutoscaler.maxNodeProvisionTime = '2h'"),
        ({"readQps": 100}, "addons.clusterAutoscaler.readQps = 100"),
        ({"maxScaleDownParallelism": 0}, "addons.clusterAutoscaler.maxScaleDownParallelism = 0"),
    ],
)
def test_bad_autoscaler_settings_name_the_key(settings, key):
    with pytest.raises(ConfigError) as caught:
        spec_for("dev", addons={"clusterAutoscaler": settings})
    assert key in str(caught.value)


def test_scale_set_tags_make_every_shard_discoverable_and_scalable_from_zero():
    config = spec_for("prod").config
    pool = config.pool("h100a")
    shard = shards(pool)[3]
    tags = scale_set_tags(config, pool, shard, "fingerprint")
    assert tags["cluster-autoscaler-enabled"] == "true" and tags["cluster-autoscaler-name"] == "prod"
    assert (tags["min"], tags["max"]) == (str(shard.min_nodes), str(shard.max_nodes)) == ("0", "100")
    assert tags["k8s.io_cluster-autoscaler_node-template_label_supercluster.io_role"] == "gpu"
    assert tags["k8s.io_cluster-autoscaler_node-template_label_supercluster.io_pool"] == "h100a"
    assert tags["k8s.io_cluster-autoscaler_node-template_label_kubernetes.azure.com_accelerator"] == "nvidia"
    assert tags["k8s.io_cluster-autoscaler_node-template_taint_nvidia.com_gpu"] == "present:NoSchedule"
    assert tags["k8s.io_cluster-autoscaler_node-template_resources_nvidia.com_gpu"] == "8"
    # The start-up taint must not be in the template, or no GPU pod would ever trigger a scale-up.
    assert not any("gpu-unhealthy" in key or "gpu-unhealthy" in value for key, value in tags.items())
    assert all("/" not in key for key in tags)


def test_tag_keys_encode_underscores_before_slashes():
    assert encode_tag_key("example.com/my_label") == "example.com_my~2label"


def test_joins_are_paced_a_bounded_scale_up_per_loop_one_node_group_at_a_time():
    """7,500-node post: hundreds of nodes joining at once overload the apiservers; a few seconds help."""
    flags = _flags()
    per_loop = int(flags["max-nodes-per-scaleup"])
    assert per_loop == cluster_autoscaler.Settings().max_nodes_per_scaleup
    assert per_loop < cluster_autoscaler.MAX_NODES_PER_SCALEUP_CEILING  # below the flag's default of 1000
    assert flags["scan-interval"] == f"{cluster_autoscaler.SCAN_INTERVAL_SECONDS}s"
    assert flags["parallel-scale-up"] == "false"
    # A 1,000-node scale-up takes at least this many seconds of loops, instead of one.
    assert 1000 // per_loop * cluster_autoscaler.SCAN_INTERVAL_SECONDS >= 60


def test_the_join_pace_is_a_setting_with_bounds():
    assert _flags(addons={"clusterAutoscaler": {"maxNodesPerScaleUp": 50}})["max-nodes-per-scaleup"] == "50"
    with pytest.raises(ConfigError, match="maxNodesPerScaleUp"):
        _flags(addons={"clusterAutoscaler": {"maxNodesPerScaleUp": 5000}})
