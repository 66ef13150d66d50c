"""kube-scheduler: bin-packing instead of spreading, and gang scheduling for MPI jobs.

One scheduler process (the kubernetes-sigs/scheduler-plugins build of kube-scheduler, pinned in
``infra/catalog/versions.py``) serves two profiles that share one cache:

- ``default-scheduler`` packs: NodeResourcesFit scores with MostAllocated, GPUs weighted highest,
  so partly used nodes fill up first, empty nodes stay empty for the autoscaler to remove, and
  whole-node jobs find whole nodes (the 2,500-node post's MostRequestedPriority, in today's API).
- ``gang-scheduler`` packs the same way and adds Coscheduling: pods labelled
  ``scheduling.x-k8s.io/pod-group: <name>`` wait in Permit until their PodGroup's ``minMember``
  pods all fit, so an MPI job of hundreds of pods starts all at once or not at all.

A second scheduler *process* would keep its own view of the nodes and could place a pod on a node
the other one just filled; scheduler-plugins' install guide warns against it for production.
Profiles in one process cannot race, at the price of the whole queue sharing Coscheduling's
queue sort (priority, then PodGroup/pod age), which the scheduler requires to be identical across
profiles.
"""

from __future__ import annotations

from typing import Any

from infra.boot import yaml_text
from infra.catalog.versions import SCHEDULER_PLUGINS_BY_KUBERNETES_MINOR, SCHEDULER_PLUGINS_IMAGE
from infra.control_plane import leader_election, paths
from infra.facts import ports

API_VERSION = "kubescheduler.config.k8s.io/v1"
DEFAULT_PROFILE = "default-scheduler"
GANG_PROFILE = "gang-scheduler"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
# Client rate limits used by the release-blocking 5,000-node job (kops/test-infra: qps=burst=100).
CLIENT_QPS = 100
CLIENT_BURST = 100
# Score every feasible node. The adaptive default scores ~5-10% of a 7,500-node cluster, and
# MostAllocated can only pack onto nodes it looks at; with about one pod per node the scheduler is
# lightly loaded (7,500-node post: "relatively low strain on the scheduler"). Measured at 1,000
# nodes (benchmarks/scheduler_benchmark.py, docs/control-plane.md): 10 % was faster and packed a
# 100-pod burst onto 1.67x the nodes; adaptive scored the same CPU nodes as 100.
PERCENTAGE_OF_NODES_TO_SCORE = 100
# GPUs are what the cluster is for: a node's GPU utilisation counts five times its CPU or memory.
BINPACK_RESOURCES = (("nvidia.com/gpu", 5), ("cpu", 1), ("memory", 1))
# How long a gang's first pods hold their nodes (Permit) waiting for the rest before all are
# released; PodGroup.spec.scheduleTimeoutSeconds overrides it per job. Plugin default: 60 s.
PERMIT_WAITING_TIME_SECONDS = 60
# After a gang fails to fit, skip it for this long so smaller work is not starved behind it.
POD_GROUP_BACKOFF_SECONDS = 30
# HTTPS port of /healthz and /metrics (its --secure-port default; the fact is in infra/facts/ports.py).
SECURE_PORT = ports.SCHEDULER


def scheduler_image(kubernetes_version: str) -> tuple[str, str, str]:
    """``(image, tag, digest)`` of the scheduler-plugins release for this Kubernetes minor."""
    minor = ".".join(kubernetes_version.split(".")[:2])
    tag, digest = SCHEDULER_PLUGINS_BY_KUBERNETES_MINOR[minor]
    return SCHEDULER_PLUGINS_IMAGE, tag, digest


def _plugin_config() -> list[dict[str, Any]]:
    return [
        {
            "name": "NodeResourcesFit",
            "args": {
                "scoringStrategy": {
                    "type": "MostAllocated",
                    "resources": [{"name": name, "weight": weight} for name, weight in BINPACK_RESOURCES],
                }
            },
        },
        # No cluster-wide default spreading (the built-in default spreads every workload's pods
        # across hosts and zones); constraints a pod states itself still apply.
        {"name": "PodTopologySpread", "args": {"defaultingType": "List"}},
        # Identical in both profiles: the queue-sort plugin and its args must match across profiles.
        {
            "name": "Coscheduling",
            "args": {
                "permitWaitingTimeSeconds": PERMIT_WAITING_TIME_SECONDS,
                "podGroupBackoffSeconds": POD_GROUP_BACKOFF_SECONDS,
            },
        },
    ]


def _profile(name: str, gang: bool) -> dict[str, Any]:
    plugins: dict[str, Any] = {
        "queueSort": {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "*"}]},
        # Balanced allocation rewards spreading usage evenly across resources: the opposite of packing.
        "score": {"disabled": [{"name": "NodeResourcesBalancedAllocation"}]},
    }
    if gang:
        # Coscheduling at every extension point it implements (PreFilter, PostFilter, Permit, Reserve).
        plugins["multiPoint"] = {"enabled": [{"name": "Coscheduling"}]}
    return {"schedulerName": name, "plugins": plugins, "pluginConfig": _plugin_config()}


def scheduler_config() -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": paths.SCHEDULER_KUBECONFIG, "qps": CLIENT_QPS, "burst": CLIENT_BURST},
        # CIS 1.4.1: --profiling is ignored once --config is given; this is its config-file form.
        "enableProfiling": False,
        # The controller-manager's timings, which an etcd leader election does not exhaust (leader_election.py).
        "leaderElection": {"leaderElect": True, **leader_election.scheduler_config()},
        "percentageOfNodesToScore": PERCENTAGE_OF_NODES_TO_SCORE,
        "profiles": [_profile(DEFAULT_PROFILE, gang=False), _profile(GANG_PROFILE, gang=True)],
    }


def render_scheduler_config() -> str:
    return yaml_text.dump(scheduler_config(), sort_keys=False)


def scheduler_flags(bind_address: str) -> dict[str, str]:
    """``bind_address``: the apiserver VM's own private address (see ``--bind-address`` below)."""
    return {
        # Delegated authentication and authorization (TokenReview, SubjectAccessReview) through the
        # scheduler's own kubeconfig. Without them every request to /metrics is refused with 403, an
        # admin certificate or Prometheus's token included; with them RBAC decides (Prometheus's
        # ClusterRole grants get on the /metrics non-resource URL).
        "authentication-kubeconfig": paths.SCHEDULER_KUBECONFIG,
        "authorization-kubeconfig": paths.SCHEDULER_KUBECONFIG,
        # The secure port (healthz, metrics) on the VM's own private address, so the control-plane
        # Prometheus shard can scrape it: a deviation from CIS 1.4.2 (loopback), documented in
        # docs/cis-benchmark.md. --bind-address takes one IP; an unspecified one (0.0.0.0) would
        # listen on every interface (kube-scheduler command-line reference; k8s.io/apiserver
        # pkg/server/options/serving.go), which this avoids. The
        # apiserver subnet's NSG admits SECURE_PORT only from the monitoring pools' subnets
        # (infra/network/security_groups.py), and every request is authenticated and authorized by the
        # apiserver (the two kubeconfigs above). The config file holds the rest.
        "bind-address": bind_address,
        "config": paths.SCHEDULER_CONFIG,
    }
