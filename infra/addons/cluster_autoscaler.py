"""cluster-autoscaler for the node pools' Azure scale sets, with the guards the 2,500-node post paid for.

In 2018 etcd filled up, every node failed its health check, and the autoscaler "decided it
thus needed to terminate all the workers"; OpenAI then made it refuse to act on more than
half the cluster. Here that is:
- ``--max-total-unready-percentage`` (below 50) and ``--ok-total-unready-count``: past them
  the autoscaler halts (cluster-autoscaler FAQ, parameter table);
- ``--scale-down-unready-enabled=false``: a control-plane outage that marks nodes NotReady
  can never turn into deleting them;
- bounded scale-down (``--max-scale-down-parallelism``, ``--max-drain-parallelism``, delays),
  a max node provision time, ``--max-nodes-total`` from the node pools;
- Azure API pacing: VMSS caches and client-side rate limits with backoff;
- paced joins: at most ``--max-nodes-per-scaleup`` nodes per scale-up, one scale-up per
  ``--scan-interval``, node groups grown one after another (``--parallel-scale-up=false``). The
  7,500-node post: "adding hundreds of nodes at once can overload API server capacity.
  Smoothing this out, even just by a few seconds, has helped avoid outages". The apiserver's
  side of the same lesson is the join priority level (``infra.control_plane.flowcontrol``).

Scale sets are found by tags (``--node-group-auto-discovery=label:...``): the flag and the node pools'
scale-set tags (``infra.node.pool.scale_set_tags``) are both built from ``infra.facts.tags.autoscaler_discovery``.
Authentication is a user-assigned managed identity (IMDS), so no secret exists anywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from infra.addons import images, k8s
from infra.addons.balloons import BALLOON_PRIORITY_VALUE
from infra.addons.settings import duration, section
from infra.addons.shared_names import CLUSTER_CRITICAL, SAFE_TO_EVICT, SYSTEM_NAMESPACE
from infra.config.cluster_config import ClusterConfig
from infra.facts import tags
from infra.facts.labels import CLOUD_IDENTITY_UID, GPU_STARTUP_TAINT_KEY, POOL_LABEL

KEY = "clusterAutoscaler"
NAME = "cluster-autoscaler"
METRICS_PORT = 8085
# The 2018 sanity check was "not more than 50% of the cluster"; the flag's own default is 45.
MAX_UNREADY_PERCENTAGE_CEILING = 49
# Azure Resource Manager throttles per subscription and principal with token buckets:
# reads 250 burst / 25 per second, writes 200 / 10 per second
# (learn.microsoft.com/azure/azure-resource-manager/management/request-limits-and-throttling).
ARM_READ_BUCKET, ARM_READ_QPS = 250, 25
ARM_WRITE_BUCKET, ARM_WRITE_QPS = 200, 10
# One scale-up per loop; the loop runs every --scan-interval (cluster-autoscaler FAQ, parameter
# table: default 10s). Rendered explicitly because the join pace below is counted in it.
SCAN_INTERVAL_SECONDS = 10
# The flag's default and ceiling (FAQ: --max-nodes-per-scaleup 1000).
MAX_NODES_PER_SCALEUP_CEILING = 1000


@dataclass(frozen=True)
class Settings:
    # A third of the cluster unready is a control-plane or network failure, not node churn.
    max_total_unready_percentage: int = 33
    ok_total_unready_count: int = 3
    max_node_provision_time: str = "20m"  # GPU nodes boot the HPC image and pass a DCGM check first
    scale_down_unneeded_time: str = "10m"
    scale_down_delay_after_add: str = "10m"
    scale_down_delay_after_delete: str = "1m"
    scale_down_delay_after_failure: str = "3m"
    max_scale_down_parallelism: int = 10
    max_drain_parallelism: int = 1
    scale_down_unready_enabled: bool = False
    # cloudprovider/azure README: 15 s by default; "a higher value such as 60 seconds can
    # protect against API throttling".
    vmss_cache_ttl_seconds: int = 60
    vmss_vms_cache_ttl_seconds: int = 300
    # A fraction of ARM's buckets, leaving the rest to deploys and other tools.
    read_qps: int = 10
    read_buckets: int = 100
    write_qps: int = 3
    write_buckets: int = 20
    # At most 100 nodes per 10 s loop: 10 joins a second, a 1,000-node scale-up spread over 100 s
    # instead of landing at once. The FAQ says the flag exists for the algorithm's latency and "is
    # not a tool to rate-limit scale-up throughput": it bounds one loop, and the next loop, a scan
    # interval later, may add the next 100. That bound per loop is the pacing relied on here.
    max_nodes_per_scaleup: int = 100


@dataclass(frozen=True)
class AzureAccess:
    """Where the scale sets live and which managed identity the autoscaler signs in as.

    ``subscription_id`` and ``identity_client_id`` are strings here and in tests; the
    component passes Pulumi outputs through unchanged."""

    subscription_id: Any
    resource_group: str
    identity_client_id: Any


def parse(raw: Mapping[str, Any], config: ClusterConfig) -> Settings:
    s = section(KEY, raw)
    x = Settings()
    settings = Settings(
        max_total_unready_percentage=s.integer(
            "maxTotalUnreadyPercentage",
            x.max_total_unready_percentage,
            minimum=1,
            maximum=MAX_UNREADY_PERCENTAGE_CEILING,
        ),
        ok_total_unready_count=s.integer("okTotalUnreadyCount", x.ok_total_unready_count, minimum=0, maximum=1_000),
        max_node_provision_time=duration(s, "maxNodeProvisionTime", x.max_node_provision_time, 3600),
        scale_down_unneeded_time=duration(s, "scaleDownUnneededTime", x.scale_down_unneeded_time),
        scale_down_delay_after_add=duration(s, "scaleDownDelayAfterAdd", x.scale_down_delay_after_add),
        scale_down_delay_after_delete=duration(s, "scaleDownDelayAfterDelete", x.scale_down_delay_after_delete),
        scale_down_delay_after_failure=duration(s, "scaleDownDelayAfterFailure", x.scale_down_delay_after_failure),
        max_scale_down_parallelism=s.integer(
            "maxScaleDownParallelism", x.max_scale_down_parallelism, minimum=1, maximum=100
        ),
        max_drain_parallelism=s.integer("maxDrainParallelism", x.max_drain_parallelism, minimum=1, maximum=100),
        scale_down_unready_enabled=s.boolean("scaleDownUnreadyEnabled", x.scale_down_unready_enabled),
        vmss_cache_ttl_seconds=s.integer("vmssCacheTtlSeconds", x.vmss_cache_ttl_seconds, minimum=15, maximum=3600),
        vmss_vms_cache_ttl_seconds=s.integer(
            "vmssVmsCacheTtlSeconds", x.vmss_vms_cache_ttl_seconds, minimum=60, maximum=3600
        ),
        read_qps=s.integer("readQps", x.read_qps, minimum=1, maximum=ARM_READ_QPS),
        read_buckets=s.integer("readBuckets", x.read_buckets, minimum=1, maximum=ARM_READ_BUCKET),
        write_qps=s.integer("writeQps", x.write_qps, minimum=1, maximum=ARM_WRITE_QPS),
        write_buckets=s.integer("writeBuckets", x.write_buckets, minimum=1, maximum=ARM_WRITE_BUCKET),
        max_nodes_per_scaleup=s.integer(
            "maxNodesPerScaleUp", x.max_nodes_per_scaleup, minimum=1, maximum=MAX_NODES_PER_SCALEUP_CEILING
        ),
    )
    s.done()
    return settings


def flags(config: ClusterConfig, s: Settings) -> list[str]:
    cluster = config.cluster_name
    return [
        "--cloud-provider=azure",
        f"--node-group-auto-discovery={tags.discovery_flag_value(cluster)}",
        f"--max-nodes-total={config.max_nodes_total}",
        f"--max-total-unready-percentage={s.max_total_unready_percentage}",
        f"--ok-total-unready-count={s.ok_total_unready_count}",
        f"--max-node-provision-time={s.max_node_provision_time}",
        f"--scale-down-unneeded-time={s.scale_down_unneeded_time}",
        f"--scale-down-delay-after-add={s.scale_down_delay_after_add}",
        f"--scale-down-delay-after-delete={s.scale_down_delay_after_delete}",
        f"--scale-down-delay-after-failure={s.scale_down_delay_after_failure}",
        f"--max-scale-down-parallelism={s.max_scale_down_parallelism}",
        f"--max-drain-parallelism={s.max_drain_parallelism}",
        f"--scale-down-unready-enabled={str(s.scale_down_unready_enabled).lower()}",
        # Paced joins (module docstring): a bounded scale-up per loop, one node group at a time.
        f"--max-nodes-per-scaleup={s.max_nodes_per_scaleup}",
        f"--scan-interval={SCAN_INTERVAL_SECONDS}s",
        "--parallel-scale-up=false",
        # The GPU start-up taint goes away once the health check passes; without this the
        # autoscaler would think a new GPU node can never take a GPU pod and never scale up.
        f"--startup-taint={GPU_STARTUP_TAINT_KEY}",
        # Balloons must still trigger scale-up: pods below the cutoff are "expendable" and do not.
        f"--expendable-pods-priority-cutoff={BALLOON_PRIORITY_VALUE}",
        "--expander=least-waste",
        # A pool's shards are one pool: spread its growth over them.
        "--balance-similar-node-groups=true",
        f"--balancing-label={POOL_LABEL}",
        # Nodes keep scratch data in emptyDir on the local SSD; that must not pin a node forever.
        "--skip-nodes-with-local-storage=false",
        "--leader-elect=true",
        f"--address=:{METRICS_PORT}",
        "--v=2",
    ]


def environment(s: Settings, azure: AzureAccess) -> list[k8s.Obj]:
    """Env of the Azure provider (cloudprovider/azure/azure_config.go, BuildAzureConfig)."""
    values: list[tuple[str, Any]] = [
        ("ARM_VM_TYPE", "vmss"),
        ("ARM_SUBSCRIPTION_ID", azure.subscription_id),
        ("ARM_RESOURCE_GROUP", azure.resource_group),
        ("ARM_USE_MANAGED_IDENTITY_EXTENSION", "true"),
        ("ARM_USER_ASSIGNED_IDENTITY_ID", azure.identity_client_id),
        ("AZURE_VMSS_CACHE_TTL", str(s.vmss_cache_ttl_seconds)),
        ("AZURE_VMSS_VMS_CACHE_TTL", str(s.vmss_vms_cache_ttl_seconds)),
        # Spread the shards' cache refreshes instead of listing every scale set at once.
        ("AZURE_VMSS_VMS_CACHE_JITTER", str(s.vmss_vms_cache_ttl_seconds // 2)),
        ("ENABLE_BACKOFF", "true"),
        ("BACKOFF_RETRIES", "6"),
        ("CLOUD_PROVIDER_RATE_LIMIT", "true"),
        ("RATE_LIMIT_READ_QPS", str(s.read_qps)),
        ("RATE_LIMIT_READ_BUCKETS", str(s.read_buckets)),
        ("RATE_LIMIT_WRITE_QPS", str(s.write_qps)),
        ("RATE_LIMIT_WRITE_BUCKETS", str(s.write_buckets)),
    ]
    return [{"name": name, "value": value} for name, value in values]


def objects(config: ClusterConfig, settings: Settings, azure: AzureAccess, kubernetes_version: str) -> list[k8s.Obj]:
    """``kubernetes_version``: the release the nodes run (``ClusterSpec.node_kubernetes_version``): the
    autoscaler's image moves only after every apiserver runs the new release (infra/day2/deploy_rules.py)."""
    ns = SYSTEM_NAMESPACE
    container = {
        "name": NAME,
        "image": images.cluster_autoscaler(kubernetes_version),
        "command": ["/cluster-autoscaler", *flags(config, settings)],
        "env": environment(settings, azure),
        "ports": [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
        "resources": k8s.resources("500m", "1Gi", "2Gi"),
        # Its own user: the one non-root host user a system node lets reach the metadata service (infra/node/cni.py).
        "securityContext": {
            **k8s.locked_down(),
            "runAsUser": CLOUD_IDENTITY_UID,
            "runAsGroup": CLOUD_IDENTITY_UID,
        },
        "livenessProbe": {
            "httpGet": {"path": "/health-check", "port": METRICS_PORT},
            "periodSeconds": 60,
            "failureThreshold": 3,
        },
    }
    pod = k8s.pod_spec(
        # Host network: the managed identity is the node VM's, reached through IMDS.
        [container],
        priority_class=CLUSTER_CRITICAL,
        service_account=NAME,
        host_network=True,
        **k8s.on_system_pool(),
    )
    return [
        k8s.service_account(NAME, ns),
        k8s.cluster_role(f"supercluster-{NAME}", _cluster_rules(), app=NAME),
        k8s.binding(
            "ClusterRoleBinding", f"supercluster-{NAME}", "ClusterRole", f"supercluster-{NAME}", NAME, ns, app=NAME
        ),
        k8s.role(
            NAME,
            ns,
            [
                k8s.rule([""], ["configmaps"], ["create"]),
                k8s.rule(
                    [""], ["configmaps"], ["get", "update", "delete"], resource_names=["cluster-autoscaler-status"]
                ),
            ],
        ),
        k8s.binding("RoleBinding", NAME, "Role", NAME, NAME, ns, ns=ns),
        # Never on a node it might remove; never evicted by its own scale-down.
        k8s.deployment(
            NAME, ns, 1, pod, {"app": NAME}, strategy={"type": "Recreate"}, pod_annotations={SAFE_TO_EVICT: "false"}
        ),
    ]


def _cluster_rules() -> list[k8s.Obj]:
    read = ["get", "list", "watch"]
    return [
        k8s.rule([""], ["events"], ["create", "patch"]),
        k8s.rule([""], ["pods/eviction"], ["create"]),
        k8s.rule([""], ["pods/status"], ["update"]),
        k8s.rule([""], ["nodes"], [*read, "update"]),
        k8s.rule(
            [""],
            ["pods", "services", "replicationcontrollers", "persistentvolumeclaims", "persistentvolumes", "namespaces"],
            read,
        ),
        k8s.rule(["policy"], ["poddisruptionbudgets"], ["list", "watch"]),
        k8s.rule(["apps"], ["statefulsets", "replicasets", "daemonsets"], read),
        k8s.rule(
            ["storage.k8s.io"],
            ["storageclasses", "csinodes", "csidrivers", "csistoragecapacities", "volumeattachments"],
            read,
        ),
        k8s.rule(["batch"], ["jobs", "cronjobs"], read),
        k8s.rule(["coordination.k8s.io"], ["leases"], ["create"]),
        k8s.rule(["coordination.k8s.io"], ["leases"], ["get", "update"], resource_names=[NAME]),
    ]
