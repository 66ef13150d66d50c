"""CoreDNS that cannot hotspot: one replica per node at most, replica count proportional to the cluster.

The 2,500-node post: with a bin-packing scheduler, 10+ KubeDNS pods landed on one node,
which then exceeded Azure's per-VM external lookup rate (~200 QPS) and broke lookups. Here:
- a *required* pod anti-affinity on ``kubernetes.io/hostname`` (upstream ships only a
  *preferred* one, cluster/addons/dns/coredns/coredns.yaml.base), so no node holds two;
- cluster-proportional-autoscaler sizes the Deployment from nodes and cores, clamped by an
  explicit ``maxReplicas``: with its example parameters (256 cores / 16 nodes per replica) a
  7,500-node cluster of 96-core VMs would ask for ~2,800 replicas, each one a WATCH on the
  apiserver (kubernetes/website examples/admin/dns/dns-horizontal-autoscaler.yaml);
- external names are forwarded to the node's own upstream resolvers (systemd-resolved's
  list, mounted from the host), so load spreads over the VMs CoreDNS runs on.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from infra.addons import images, k8s
from infra.addons.corefile import ServerBlock, d, render
from infra.addons.settings import section
from infra.addons.shared_names import CLUSTER_CRITICAL, SYSTEM_NAMESPACE
from infra.config.cluster_config import ClusterConfig
from infra.config.errors import ConfigError
from infra.facts.labels import HOSTNAME_LABEL, ROLE_CPU, ROLE_LABEL
from infra.network.addressing import CLUSTER_DOMAIN, AddressPlan

KEY = "coredns"
NAME = "coredns"
SERVICE = "kube-dns"
SELECTOR = {"k8s-app": "kube-dns"}  # the label every DNS client tooling (and NodeLocal DNS) expects
AUTOSCALER = "dns-autoscaler"
METRICS_PORT = 9153
# systemd-resolved keeps the node's real upstream servers here (its stub, 127.0.0.53, is
# in /etc/resolv.conf and is useless from a pod); Ubuntu 24.04 nodes run systemd-resolved.
HOST_UPSTREAM_RESOLV_CONF = "/run/systemd/resolve/resolv.conf"
UPSTREAM_RESOLV_DIR = "/etc/upstream-dns"
# The official 5,000-node scale job raises CoreDNS memory to 340Mi at >= 5,000 nodes
# (kubernetes/test-infra sig-scalability presets); upstream's limit is 170Mi.
LARGE_CLUSTER_NODES = 5_000


@dataclass(frozen=True)
class Settings:
    min_replicas: int = 2
    # An explicit ceiling: NodeLocal DNS answers most lookups on the node, so CoreDNS only
    # sees cache misses; every extra replica is one more apiserver watcher.
    max_replicas: int = 64
    nodes_per_replica: int = 16
    cores_per_replica: int = 256


def parse(raw: Mapping[str, Any], config: ClusterConfig) -> Settings:
    s = section(KEY, raw)
    defaults = Settings()
    settings = Settings(
        min_replicas=s.integer("minReplicas", defaults.min_replicas, minimum=1, maximum=100),
        max_replicas=s.integer("maxReplicas", defaults.max_replicas, minimum=1, maximum=1_000),
        nodes_per_replica=s.integer("nodesPerReplica", defaults.nodes_per_replica, minimum=1),
        cores_per_replica=s.integer("coresPerReplica", defaults.cores_per_replica, minimum=1),
    )
    s.done()
    if settings.max_replicas < settings.min_replicas:
        raise ConfigError(
            s.key("maxReplicas"), settings.max_replicas, f"at least minReplicas ({settings.min_replicas})"
        )
    return settings


def corefile() -> str:
    return render(
        [
            ServerBlock(
                (".:53",),
                (
                    d("errors"),
                    d("health", block=(d("lameduck", "5s"),)),
                    d("ready"),
                    # `pods insecure` answers pod A records without watching every pod in the cluster.
                    d(
                        "kubernetes",
                        CLUSTER_DOMAIN,
                        "in-addr.arpa",
                        "ip6.arpa",
                        block=(d("pods", "insecure"), d("fallthrough", "in-addr.arpa", "ip6.arpa"), d("ttl", "30")),
                    ),
                    d("prometheus", f":{METRICS_PORT}"),
                    d("forward", ".", f"{UPSTREAM_RESOLV_DIR}/resolv.conf", block=(d("max_concurrent", "1000"),)),
                    d("cache", "30"),
                    d("loop"),
                    d("reload"),
                    d("loadbalance"),
                ),
            )
        ]
    )


def autoscaler_parameters(settings: Settings) -> dict[str, Any]:
    """cluster-proportional-autoscaler's ``linear`` mode: max(cores/c, nodes/n), clamped to [min, max]."""
    return {
        "linear": {
            "coresPerReplica": settings.cores_per_replica,
            "nodesPerReplica": settings.nodes_per_replica,
            "min": settings.min_replicas,
            "max": settings.max_replicas,
            "preventSinglePointFailure": True,
            "includeUnschedulableNodes": True,
        }
    }


def objects(config: ClusterConfig, addresses: AddressPlan, settings: Settings) -> list[k8s.Obj]:
    ns = SYSTEM_NAMESPACE
    memory_limit = "340Mi" if config.max_nodes_total >= LARGE_CLUSTER_NODES else "170Mi"
    return [
        k8s.service_account(NAME, ns),
        k8s.cluster_role(
            f"supercluster-{NAME}",
            [
                k8s.rule(["discovery.k8s.io"], ["endpointslices"], ["list", "watch"]),
                k8s.rule([""], ["services", "namespaces"], ["list", "watch"]),
            ],
            app=NAME,
        ),
        k8s.binding(
            "ClusterRoleBinding", f"supercluster-{NAME}", "ClusterRole", f"supercluster-{NAME}", NAME, ns, app=NAME
        ),
        k8s.config_map(NAME, ns, {"Corefile": corefile()}),
        _deployment(memory_limit),
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": k8s.metadata(NAME, ns),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": dict(SELECTOR)}},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": k8s.metadata(SERVICE, ns, app=NAME),
            "spec": {
                "selector": dict(SELECTOR),
                "clusterIP": addresses.dns_service_ip,
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                    {"name": "metrics", "port": METRICS_PORT, "protocol": "TCP", "targetPort": METRICS_PORT},
                ],
            },
        },
        *_proportional_autoscaler(settings),
    ]


def _deployment(memory_limit: str) -> k8s.Obj:
    container = {
        "name": NAME,
        "image": images.COREDNS,
        "args": ["-conf", "/etc/coredns/Corefile"],
        "ports": [
            {"name": "dns", "containerPort": 53, "protocol": "UDP"},
            {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        "resources": k8s.resources("100m", "70Mi", memory_limit),
        "securityContext": k8s.locked_down("NET_BIND_SERVICE", as_nobody=False),  # as upstream
        "livenessProbe": {
            "httpGet": {"path": "/health", "port": 8080},
            "initialDelaySeconds": 60,
            "timeoutSeconds": 5,
            "failureThreshold": 5,
        },
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}},
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/coredns", "readOnly": True},
            {"name": "upstream", "mountPath": UPSTREAM_RESOLV_DIR, "readOnly": True},
        ],
    }
    pod = k8s.pod_spec(
        [container],
        priority_class=CLUSTER_CRITICAL,
        service_account=NAME,
        dns_policy="Default",
        affinity={
            # Required, not preferred: the 2,500-node post's fix. Never two DNS pods on one node.
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {
                            "matchExpressions": [{"key": "k8s-app", "operator": "In", "values": [SELECTOR["k8s-app"]]}]
                        },
                        "topologyKey": HOSTNAME_LABEL,
                    }
                ]
            },
            # CPU nodes first: a GPU node's VM should not serve the cluster's DNS.
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "preference": {
                            "matchExpressions": [{"key": ROLE_LABEL, "operator": "In", "values": [ROLE_CPU]}]
                        },
                    }
                ]
            },
        },
        tolerations=[{"key": "CriticalAddonsOnly", "operator": "Exists"}],
        volumes=[
            {"name": "config", "configMap": {"name": NAME, "items": [{"key": "Corefile", "path": "Corefile"}]}},
            {
                "name": "upstream",
                "hostPath": {"path": HOST_UPSTREAM_RESOLV_CONF.rsplit("/", 1)[0], "type": "Directory"},
            },
        ],
    )
    # No surge: with the anti-affinity a surge pod needs a node no DNS pod is on.
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
    # No replica count: it belongs to the proportional autoscaler, and a `pulumi up` that
    # applied one would shrink DNS back to it until the autoscaler's next poll.
    return k8s.deployment(NAME, SYSTEM_NAMESPACE, None, pod, SELECTOR, strategy=strategy)


def _proportional_autoscaler(settings: Settings) -> list[k8s.Obj]:
    ns = SYSTEM_NAMESPACE
    container = {
        "name": "autoscaler",
        "image": images.CLUSTER_PROPORTIONAL_AUTOSCALER,
        "command": [
            "/cluster-proportional-autoscaler",
            f"--namespace={ns}",
            f"--configmap={AUTOSCALER}",
            f"--target=deployment/{NAME}",
            "--v=2",
        ],
        "resources": k8s.resources("20m", "32Mi", "64Mi"),
        "securityContext": k8s.locked_down(),
    }
    pod = k8s.pod_spec(
        [container], priority_class=CLUSTER_CRITICAL, service_account=AUTOSCALER, nodeSelector={ROLE_LABEL: ROLE_CPU}
    )
    return [
        k8s.service_account(AUTOSCALER, ns),
        # Counting nodes is one cluster-wide watch from one pod, not one per node.
        k8s.cluster_role(f"supercluster-{AUTOSCALER}", [k8s.rule([""], ["nodes"], ["list", "watch"])]),
        k8s.binding(
            "ClusterRoleBinding",
            f"supercluster-{AUTOSCALER}",
            "ClusterRole",
            f"supercluster-{AUTOSCALER}",
            AUTOSCALER,
            ns,
            app=AUTOSCALER,
        ),
        k8s.role(
            AUTOSCALER,
            ns,
            [
                k8s.rule(["apps"], ["deployments/scale"], ["get", "update"], resource_names=[NAME]),
                k8s.rule(["apps"], ["deployments"], ["get"], resource_names=[NAME]),
                k8s.rule([""], ["configmaps"], ["get"], resource_names=[AUTOSCALER]),
            ],
        ),
        k8s.binding("RoleBinding", AUTOSCALER, "Role", AUTOSCALER, AUTOSCALER, ns, ns=ns),
        k8s.config_map(
            AUTOSCALER, ns, {"linear": json.dumps(autoscaler_parameters(settings)["linear"], sort_keys=True)}
        ),
        k8s.deployment(AUTOSCALER, ns, 1, pod, {"k8s-app": AUTOSCALER}),
    ]
