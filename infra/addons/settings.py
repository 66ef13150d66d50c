"""Strict reading of one add-on's settings (``addons.<key>.*`` in config)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infra.config.errors import ConfigError
from infra.config.schema import Section

DURATION_PATTERN = r"[1-9][0-9]*(s|m|h)"
# Go's time.Duration (and Prometheus's model.Duration) is an int64 count of nanoseconds, so at most
# 2562047h47m16.854775807s (pkg.go.dev/time#Duration); a longer flag value makes the component exit.
GO_MAX_DURATION_SECONDS = (2**63 - 1) // 10**9
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


def section(key: str, raw: Mapping[str, Any]) -> Section:
    """The settings of ``addons.<key>`` (without ``enabled``, which infra.config.cluster_config reads)."""
    return Section(raw, f"addons.{key}")


def duration(s: Section, name: str, default: str, maximum_seconds: int | None = None) -> str:
    """A Go duration as Kubernetes components take it: ``30s``, ``10m``, ``1h``."""
    value = s.string(name, default, pattern=DURATION_PATTERN, accepted="a duration such as 30s, 10m or 1h")
    check_go_duration(s, name, value)
    if maximum_seconds is not None and seconds(value) > maximum_seconds:
        raise ConfigError(s.key(name), value, f"a duration of at most {maximum_seconds}s")
    return value


def check_go_duration(s: Section, name: str, value: str) -> None:
    """Refuses a duration longer than Go's time.Duration holds (``99999999h``)."""
    if seconds(value) > GO_MAX_DURATION_SECONDS:
        raise ConfigError(s.key(name), value, "a duration Go's time.Duration holds (at most 2562047h)")


def seconds(value: str) -> int:
    return int(value[:-1]) * UNIT_SECONDS[value[-1]]


# What each add-on setting is for, keyed as in config. The setting's type, bounds and default are
# declared where its add-on reads it; docs/config-reference.md joins both (plan.config_docs),
# and a test fails when a setting has no description here or a description names no setting.
DESCRIPTIONS = {
    "addons.coredns.minReplicas": "lower bound of the cluster-proportional autoscaler",
    "addons.coredns.maxReplicas": "upper bound of the cluster-proportional autoscaler",
    "addons.coredns.nodesPerReplica": "replicas = max(nodes / nodesPerReplica, cores / coresPerReplica), clamped",
    "addons.coredns.coresPerReplica": "see nodesPerReplica",
    "addons.nodeLocalDns.localIp": "the node-local DNS cache's link-local address (it also answers on the "
    "cluster DNS IP); routed via the host by the CNI",
    "addons.clusterAutoscaler.maxTotalUnreadyPercentage": "the autoscaler halts when more of the cluster is unready",
    "addons.clusterAutoscaler.okTotalUnreadyCount": "unready nodes tolerated whatever the percentage",
    "addons.clusterAutoscaler.maxNodeProvisionTime": "a node not ready by then counts as failed",
    "addons.clusterAutoscaler.scaleDownUnneededTime": "how long a node must be unneeded before it is removed",
    "addons.clusterAutoscaler.scaleDownDelayAfterAdd": "scale-down pause after a scale-up",
    "addons.clusterAutoscaler.scaleDownDelayAfterDelete": "scale-down pause after a node is deleted",
    "addons.clusterAutoscaler.scaleDownDelayAfterFailure": "scale-down pause after a failed scale-down",
    "addons.clusterAutoscaler.maxScaleDownParallelism": "empty nodes removed at once",
    "addons.clusterAutoscaler.maxDrainParallelism": "nodes drained at once",
    "addons.clusterAutoscaler.scaleDownUnreadyEnabled": "whether unready nodes may be removed (off: an outage never "
    "becomes mass deletion)",
    "addons.clusterAutoscaler.vmssCacheTtlSeconds": "Azure scale-set cache lifetime (fewer ARM reads)",
    "addons.clusterAutoscaler.vmssVmsCacheTtlSeconds": "Azure scale-set instance cache lifetime",
    "addons.clusterAutoscaler.readQps": "client-side ARM read rate limit, at most ARM's own",
    "addons.clusterAutoscaler.readBuckets": "client-side ARM read burst, at most ARM's own",
    "addons.clusterAutoscaler.writeQps": "client-side ARM write rate limit, at most ARM's own",
    "addons.clusterAutoscaler.writeBuckets": "client-side ARM write burst, at most ARM's own",
    "addons.clusterAutoscaler.maxNodesPerScaleUp": "nodes one scale-up adds at most; one scale-up per 10 s loop "
    "paces joins (docs/node-pools.md)",
    "addons.balloons.headroomNodes": "pool name -> warm nodes kept free for it (at most the pool's maxNodes; "
    "0 for a retired pool)",
    "addons.rdmaDevicePlugin.podsPerNode": "pods of one InfiniBand node that may share its HCAs (rdma/ib)",
    "addons.gpuHealthCheck.intervalSeconds": "how often DCGM checks the GPUs",
    "addons.gpuHealthCheck.reconcileSeconds": "how often the taint is re-asserted when nothing changed",
    "addons.trafficAccounting.port": "the traffic exporter's port on every node (host network)",
    "addons.monitoring.scrapeInterval": "Prometheus scrape and rule interval",
    "addons.monitoring.retention": "how long Prometheus keeps samples",
    "addons.monitoring.storageGiB": "each Prometheus's TSDB size budget on its node's local SSD (at most half "
    "the smallest CPU size's temp disk)",
    "addons.monitoring.memoryGiB": "each Prometheus's memory",
    "addons.monitoring.seriesPerShard": "active series one Prometheus shard is sized for; the node shards are "
    "derived from it and the pools' maxNodes (docs/monitoring.md)",
    "addons.monitoring.nodeShards": "node shards (none: derived from the pools' maxNodes and seriesPerShard; "
    "fewer than derived is refused)",
    "addons.monitoring.replicas": "identical Prometheus servers per shard (an HA pair by default)",
    "addons.monitoring.passwordRotation": "raise it by one to rotate the monitoring stack's passwords in the "
    "next deploy (docs/runbooks/rotate-monitoring-passwords.md)",
    "addons.monitoring.receivers": "who Alertmanager pages: each {name, type (webhook, email, pagerduty or "
    "msteams), keyVaultSecret (the Key Vault secret holding the URL, key or "
    "SMTP password), severities (default critical and warning); for email also "
    "to, from, smarthost (host:port), username} (docs/monitoring.md)",
}
