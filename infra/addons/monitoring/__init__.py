"""Monitoring that pages a human, sized for the pools' maxNodes (docs/monitoring.md).

- **Prometheus, sharded** (``shards``): one control-plane shard and N node shards, N derived from
  the pools' ``maxNodes`` and the bounded series per node; each shard a StatefulSet of
  ``replicas`` identical servers (an HA pair: both scrape and alert, Alertmanager de-duplicates).
- **Alertmanager** (``alertmanager``): a StatefulSet of two gossiping replicas; the receivers
  and routing tree come from config, their secrets from Key Vault, never from the plan.
- **Exporters** (``exporters``): node-exporter on every node, DCGM exporter on GPU nodes,
  kube-state-metrics; kubelet, cAdvisor, NodeLocal DNS and the iptables exporter are scraped
  where they already run.
- **Rules** (``rules``) and **dashboards** (``dashboards``), rendered by the program; a read-only
  **Grafana** (``grafana``) with one data source per shard shows the dashboards.

Storage: each Prometheus keeps its TSDB on its node's local SSD (a hostPath), which survives
container and pod restarts and VM reboots; no Azure Disk CSI driver runs in this cluster. The
two replicas of a shard are the replication: losing one node loses one replica's history.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from infra.addons import cluster_autoscaler, images, k8s, node_local_dns, traffic_accounting
from infra.addons.monitoring import alertmanager, credential, exporters, grafana, rules, shards
from infra.addons.monitoring.alertmanager import Receiver
from infra.addons.settings import check_go_duration, duration, section
from infra.addons.shared_names import MONITORING_NAMESPACE, SAFE_TO_EVICT, SYSTEM_NAMESPACE, SYSTEM_PRIORITY
from infra.config.cluster_config import ClusterConfig
from infra.config.errors import ConfigError
from infra.config.schema import Section
from infra.etcd import backup_metrics
from infra.facts import ports
from infra.facts.host_paths import LOCAL_SSD_MOUNT
from infra.facts.labels import MONITORING_ROLE
from infra.network.addressing import AddressPlan

KEY = "monitoring"
NAME = "prometheus"
SERVICE_ACCOUNT = NAME
NAMESPACE = MONITORING_NAMESPACE
PORT = 9090
CONFIG_DIR = "/etc/prometheus"
RULES_DIR = f"{CONFIG_DIR}/rules"
DATA_DIR = "/prometheus"
# Where each shard's TSDB lives on its node: the node's local SSD (NVMe or temp disk), where
# kubelet and containerd keep their state too.
HOST_DATA_DIR = f"{LOCAL_SSD_MOUNT}/prometheus"
# The TSDB may take at most this share of the smallest CPU node's temp disk (containerd's images
# and the pods' emptyDirs share it).
MAX_LOCAL_DISK_SHARE = 0.5
CONTROL_PLANE_SHARD = "control-plane"
# A derived count is sized for this many times the pools' maxNodes (this project's choice): pools can then
# grow by a quarter (prod: 7,500 -> 9,375 nodes) before a deploy must add shards and re-partition the nodes.
SHARD_HEADROOM = 1.25
# What the monitoring stack's pods listen on: Prometheus, Alertmanager's API and its gossip (TCP and UDP),
# Grafana, kube-state-metrics and its own metrics. All but the gossip port ask for the stack's own credential
# (credential.py), and every one of them is also reached only from the
# system pools' subnets (the stack itself): every system-pool node drops the rest in its forward hook
# (infra/node/cni.py). People reach them with `kubectl port-forward`, which the apiserver authorizes.
STACK_TCP_PORTS = (
    PORT,
    alertmanager.PORT,
    alertmanager.CLUSTER_PORT,
    grafana.PORT,
    exporters.KUBE_STATE_METRICS_PORT,
    exporters.KUBE_STATE_METRICS_TELEMETRY_PORT,
)
STACK_UDP_PORTS = (alertmanager.CLUSTER_PORT,)
# Pod Security level of the monitoring namespace: the shards' hostPath data directory is refused under
# "baseline" (the cluster default).
PRIVILEGED = "privileged"


@dataclass(frozen=True)
class Settings:
    scrape_interval: str = "30s"
    retention: str = "15d"
    storage_gib: int = 200
    memory_gib: int = 16
    # The active series one shard is sized for (this project's budget, not a Prometheus limit):
    # memoryGiB must hold it; check with prometheus_tsdb_head_series on a running shard.
    series_per_shard: int = 4_000_000
    node_shards: int | None = None  # None: derived from the pools' maxNodes
    replicas: int = 2
    receivers: tuple[Receiver, ...] = field(default_factory=tuple)
    # Each value is a generation of the stack's passwords (credential.py): raising it makes new ones.
    password_rotation: int = 0


def parse(raw: Mapping[str, Any], config: ClusterConfig) -> Settings:
    s = section(KEY, raw)
    x = Settings()
    settings = Settings(
        scrape_interval=duration(s, "scrapeInterval", x.scrape_interval, maximum_seconds=300),
        retention=s.string(
            "retention", x.retention, pattern=r"[1-9][0-9]*(h|d|w)", accepted="a retention such as 15d, 2w or 72h"
        ),
        storage_gib=s.integer("storageGiB", x.storage_gib, minimum=10, maximum=10_000),
        memory_gib=s.integer("memoryGiB", x.memory_gib, minimum=2, maximum=1_024),
        series_per_shard=s.integer("seriesPerShard", x.series_per_shard, minimum=100_000, maximum=50_000_000),
        node_shards=s.integer("nodeShards", None, minimum=1, maximum=256),
        replicas=s.integer("replicas", x.replicas, minimum=1, maximum=3),
        receivers=s.items("receivers", _parse_receiver, default=[]),
        password_rotation=s.integer("passwordRotation", x.password_rotation, minimum=0, maximum=1_000_000),
    )
    s.done()
    check_go_duration(s, "retention", settings.retention)
    names = [r.name for r in settings.receivers]
    if len(set(names)) != len(names) or alertmanager.NULL_RECEIVER in names:
        raise ConfigError(s.key("receivers"), names, f"unique receiver names other than {alertmanager.NULL_RECEIVER!r}")
    if config.production and not settings.receivers:
        raise ConfigError(
            s.key("receivers"), [], "at least one receiver: production is true, so alerts must page someone"
        )
    smallest = min(
        (pool.size for pool in config.node_pools if pool.role == MONITORING_ROLE and not pool.size.nvme_disks),
        key=lambda size: size.temp_disk_gib,
        default=None,
    )
    if smallest is not None and settings.storage_gib > smallest.temp_disk_gib * MAX_LOCAL_DISK_SHARE:
        raise ConfigError(
            s.key("storageGiB"),
            settings.storage_gib,
            f"at most {int(smallest.temp_disk_gib * MAX_LOCAL_DISK_SHARE)} (half the local disk of "
            f"{smallest.name}, the smallest CPU node Prometheus may run on)",
        )
    needed = node_shard_count(settings, config)
    if settings.node_shards is not None and settings.node_shards < needed:
        raise ConfigError(
            s.key("nodeShards"),
            settings.node_shards,
            f"at least {needed} (the pools' maxNodes x {series_per_node(config)} series per node "
            f"/ seriesPerShard {settings.series_per_shard})",
        )
    return settings


def _parse_receiver(s: Section) -> Receiver:
    kind = s.choice("type", alertmanager.RECEIVER_TYPES)
    email = kind == "email"
    receiver = Receiver(
        name=s.string("name", pattern=r"[a-z0-9][a-z0-9-]{0,62}", accepted="a lowercase name (letters, digits, '-')"),
        type=kind,
        secret=s.string(
            "keyVaultSecret",
            pattern=r"[A-Za-z0-9-]{1,127}",
            accepted="a Key Vault secret name (1-127 letters, digits and '-')",
        ),
        severities=tuple(s.string_list("severities", list(alertmanager.SEVERITIES))),
        to=s.string("to") if email else "",
        sender=s.string("from") if email else "",
        smarthost=s.string("smarthost", pattern=r"[^\s:]+:[0-9]+", accepted="host:port") if email else "",
        username=s.string("username", "", allow_empty=True) if email else "",
    )
    for severity in receiver.severities:
        if severity not in alertmanager.SEVERITIES:
            raise ConfigError(
                s.key("severities"), list(receiver.severities), "a list of " + ", ".join(alertmanager.SEVERITIES)
            )
    s.done()
    return receiver


# ----------------------------------------------------------------------------- sizing


def _node_jobs(config: ClusterConfig) -> tuple[shards.NodeJob, ...]:
    # The raw setting: trafficAccounting's own parse (which runs first) has validated it.
    port = config.addons.traffic_accounting.settings.get("port", traffic_accounting.DEFAULT_PORT)
    return shards.node_jobs(node_local_dns.METRICS_PORT, port)


def series_per_node(config: ClusterConfig) -> int:
    return shards.series_per_node(_node_jobs(config))


def node_shard_count(settings: Settings, config: ClusterConfig) -> int:
    """The node shards needed so that no shard holds more than ``seriesPerShard`` series at maxNodes."""
    return shards.node_shard_count(config.max_nodes_total, series_per_node(config), settings.series_per_shard)


def planned_node_shards(settings: Settings, config: ClusterConfig, last_node_shards: int | None) -> int:
    """The node shards this deploy runs. ``nodeShards`` when set (``parse`` checked it holds maxNodes); else
    the last deploy's count while it still holds maxNodes, so a resize inside that range changes no shard
    (every shard's hashmod modulus and peer list depend on the count); else, on a first deploy or when the
    pools outgrow it, the count for ``SHARD_HEADROOM`` x maxNodes."""
    if settings.node_shards is not None:
        return settings.node_shards
    if last_node_shards is not None and last_node_shards >= node_shard_count(settings, config):
        return last_node_shards
    with_headroom = math.ceil(config.max_nodes_total * SHARD_HEADROOM)
    return shards.node_shard_count(with_headroom, series_per_node(config), settings.series_per_shard)


def sized(settings: Settings, config: ClusterConfig, last_node_shards: int | None) -> Settings:
    """The settings with ``node_shards`` fixed for this deploy (``planned_node_shards``)."""
    return replace(settings, node_shards=planned_node_shards(settings, config, last_node_shards))


def shard_names(config: ClusterConfig, settings: Settings) -> list[str]:
    count = planned_node_shards(settings, config, None)
    return [CONTROL_PLANE_SHARD, *(f"nodes-{i}" for i in range(count))]


def deploy_output(settings: Settings, config: ClusterConfig) -> dict[str, int]:
    """The ``monitoring`` output (``infra.day2.deploy_rules.MONITORING_OUTPUT``) the next deploy sizes from."""
    return {"nodeShards": planned_node_shards(settings, config, None)}


# ----------------------------------------------------------------------------- configuration


def shard_workload(shard: str) -> str:
    """The StatefulSet, and its headless Service, of one shard."""
    return f"{NAME}-{shard}"


def replica_addresses(shard: str, replicas: int) -> list[str]:
    """Each replica of a shard by its stable StatefulSet DNS name under the headless Service."""
    workload = shard_workload(shard)
    return [f"{workload}-{i}.{workload}.{NAMESPACE}.svc:{PORT}" for i in range(replicas)]


def prometheus_configs(config: ClusterConfig, addresses: AddressPlan, settings: Settings) -> dict[str, str]:
    """``{shard name: prometheus.yml}``."""
    names = shard_names(config, settings)
    node_count = len(names) - 1
    etcd_ips = {
        "main": addresses.etcd_ips("etcd", config.etcd.members),
        "events": addresses.etcd_ips("events-etcd", config.events_etcd.members),
    }
    documents = {}
    for index, name in enumerate(names):
        if name == CONTROL_PLANE_SHARD:
            jobs = [
                shards.apiserver_scrape_config(),
                # Both bind their secure port to the machine's own address (their --bind-address), the address
                # its apiserver advertises in the kubernetes Service's EndpointSlice.
                *(
                    shards.component_scrape_config(job, port)
                    for job, port in (
                        (rules.JOB_SCHEDULER, ports.SCHEDULER),
                        (rules.JOB_CONTROLLER_MANAGER, ports.CONTROLLER_MANAGER),
                    )
                ),
                shards.token_minter_scrape_config(ports.TOKEN_MINTER_METRICS),
                *(
                    shards.static_scrape_config(rules.JOB_ETCD[cluster], [f"{ip}:{ports.ETCD_METRICS}" for ip in ips])
                    for cluster, ips in etcd_ips.items()
                ),
                # Every etcd machine publishes the backup age (infra/etcd/backup_metrics.py).
                shards.etcd_backup_scrape_config(
                    [f"{ip}:{backup_metrics.METRICS_PORT}" for ips in etcd_ips.values() for ip in ips]
                ),
                shards.pod_scrape_config(rules.JOB_COREDNS, SYSTEM_NAMESPACE, "k8s-app=kube-dns", "metrics"),
                shards.pod_scrape_config(
                    rules.JOB_AUTOSCALER, SYSTEM_NAMESPACE, f"app={cluster_autoscaler.NAME}", "metrics"
                ),
                shards.authenticated(
                    shards.pod_scrape_config(
                        rules.JOB_KUBE_STATE_METRICS,
                        NAMESPACE,
                        f"app.kubernetes.io/name={exporters.KUBE_STATE_METRICS}",
                        "http-metrics",
                    )
                ),
            ]
            # The monitoring stack itself: Alertmanager here, and every node shard's liveness.
            jobs += [
                shards.authenticated(
                    shards.static_scrape_config(
                        rules.JOB_ALERTMANAGER, alertmanager.api_addresses(NAMESPACE, ALERTMANAGER_REPLICAS)
                    )
                ),
                shards.authenticated(
                    shards.peer_scrape_config({n: replica_addresses(n, settings.replicas) for n in names[1:]})
                ),
            ]
        else:
            jobs = [shards.node_scrape_config(job, index - 1, node_count) for job in _node_jobs(config)]
            jobs.append(
                shards.authenticated(
                    shards.peer_scrape_config(
                        {CONTROL_PLANE_SHARD: replica_addresses(CONTROL_PLANE_SHARD, settings.replicas)}
                    )
                )
            )
        # Every replica of this shard, so a replica that cannot reach Alertmanager is reported by its twin.
        jobs.append(
            shards.authenticated(
                shards.static_scrape_config(rules.JOB_PROMETHEUS, replica_addresses(name, settings.replicas))
            )
        )
        documents[name] = rules.dump(
            {
                "global": {
                    "scrape_interval": settings.scrape_interval,
                    "evaluation_interval": settings.scrape_interval,
                    "external_labels": {"cluster": config.cluster_name, "shard": name},
                },
                "alerting": {
                    "alertmanagers": [
                        {
                            "basic_auth": credential.basic_auth(),
                            "static_configs": [
                                {"targets": alertmanager.api_addresses(NAMESPACE, ALERTMANAGER_REPLICAS)}
                            ],
                        }
                    ]
                },
                "rule_files": [f"{RULES_DIR}/*.yaml"],
                "scrape_configs": jobs,
            }
        )
    return documents


def rule_files(max_unready_percent: int) -> dict[str, dict[str, str]]:
    """``{"control-plane" | "nodes": {file name: rule file}}``; ``max_unready_percent`` is the
    cluster autoscaler's ``maxTotalUnreadyPercentage`` (its unready guard)."""
    return rules.rule_files(max_unready_percent)


ALERTMANAGER_REPLICAS = 2


# ----------------------------------------------------------------------------- objects


def _shard_objects(settings: Settings, shard: str, config_text: str, rule_texts: dict[str, str]) -> list[k8s.Obj]:
    name = shard_workload(shard)
    checksum = hashlib.sha256((config_text + "".join(rule_texts.values())).encode()).hexdigest()[:16]
    labels = {"app.kubernetes.io/name": NAME, "supercluster.io/shard": shard}
    container = {
        "name": NAME,
        "image": images.PROMETHEUS,
        "args": [
            f"--config.file={CONFIG_DIR}/prometheus.yml",
            f"--storage.tsdb.path={DATA_DIR}",
            f"--storage.tsdb.retention.time={settings.retention}",
            # Leave room below the disk budget so the node's disk never fills.
            f"--storage.tsdb.retention.size={int(settings.storage_gib * 0.85)}GB",
            f"--web.config.file={credential.path(credential.WEB_CONFIG)}",
        ],
        "ports": [{"name": "web", "containerPort": PORT, "protocol": "TCP"}],
        "resources": k8s.resources("1", f"{settings.memory_gib}Gi"),
        "securityContext": k8s.locked_down(),
        # The API asks every caller for the credential, the kubelet's probes included: promtool (in the image)
        # asks with it.
        "readinessProbe": _probe("promtool", "check", "ready", f"--url=http://localhost:{PORT}"),
        "livenessProbe": {
            **_probe("promtool", "check", "healthy", f"--url=http://localhost:{PORT}"),
            "initialDelaySeconds": 300,
        },
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            credential.volume_mount(),
            {"name": "rules", "mountPath": RULES_DIR, "readOnly": True},
            {"name": "data", "mountPath": DATA_DIR},
        ],
    }
    # The hostPath directory is created root-owned; the init container hands it to Prometheus's uid.
    prepare = {
        "name": "data-owner",
        "image": images.PROMETHEUS,
        "command": ["chown", "-R", "65534:65534", DATA_DIR],
        "resources": k8s.resources("10m", "16Mi"),
        "securityContext": k8s.locked_down("CHOWN", "DAC_OVERRIDE", "FOWNER", as_nobody=False),
        "volumeMounts": [{"name": "data", "mountPath": DATA_DIR}],
    }
    pod = k8s.pod_spec(
        [container],
        priority_class=SYSTEM_PRIORITY,
        service_account=SERVICE_ACCOUNT,
        **k8s.on_system_pool(),
        # The two replicas of a shard never share a node: one node's loss leaves the other's history.
        affinity={
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}
                ]
            }
        },
        initContainers=[prepare],
        volumes=[
            {"name": "config", "configMap": {"name": name}},
            {"name": "rules", "configMap": {"name": f"{name}-rules"}},
            credential.volume(),
            {"name": "data", "hostPath": {"path": f"{HOST_DATA_DIR}/{shard}", "type": "DirectoryOrCreate"}},
        ],
    )
    return [
        k8s.config_map(name, NAMESPACE, {"prometheus.yml": config_text}, app=NAME),
        k8s.config_map(f"{name}-rules", NAMESPACE, rule_texts, app=NAME),
        stateful_set(
            name,
            NAMESPACE,
            settings.replicas,
            pod,
            labels,
            service=name,
            pod_annotations={SAFE_TO_EVICT: "false", "supercluster.io/config-sha256": checksum},
            app=NAME,
        ),
        headless_service(name, NAMESPACE, labels, [("web", PORT)], app=NAME),
    ]


def _probe(*command: str) -> k8s.Obj:
    """A probe that runs one of the image's own tools against the API with the stack's credential."""
    return {
        "exec": {"command": [*command, f"--http.config.file={credential.path(credential.CLIENT_CONFIG)}"]},
        "timeoutSeconds": 5,
    }


def stateful_set(
    name: str,
    ns: str,
    replicas: int,
    pod: k8s.Obj,
    match_labels: Mapping[str, str],
    *,
    service: str,
    pod_annotations: Mapping[str, str] | None = None,
    app: str | None = None,
) -> k8s.Obj:
    """Stable pod names (``<name>-0``...) under a headless Service; replicas replaced one at a time."""
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": k8s.metadata(name, ns, app=app),
        "spec": {
            "replicas": replicas,
            "serviceName": service,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": dict(match_labels)},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": k8s.template(app or name, pod, match_labels, pod_annotations),
        },
    }


def headless_service(
    name: str, ns: str, selector: Mapping[str, str], ports: list[tuple[str, int]], app: str | None = None
) -> k8s.Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": k8s.metadata(name, ns, app=app),
        "spec": {
            "clusterIP": "None",
            "selector": dict(selector),
            "publishNotReadyAddresses": True,
            "ports": [{"name": n, "port": p, "protocol": "TCP", "targetPort": p} for n, p in ports],
        },
    }


def _alertmanager_objects(settings: Settings, cluster_name: str) -> list[k8s.Obj]:
    name, ns = alertmanager.NAME, NAMESPACE
    text = alertmanager.config(settings.receivers, cluster_name)
    labels = {"app.kubernetes.io/name": name}
    container = {
        "name": name,
        "image": images.ALERTMANAGER,
        "args": [
            f"--config.file={alertmanager.CONFIG_DIR}/alertmanager.yml",
            "--storage.path=/alertmanager",
            f"--web.config.file={credential.path(credential.WEB_CONFIG)}",
            f"--cluster.listen-address=0.0.0.0:{alertmanager.CLUSTER_PORT}",
            f"--cluster.tls-config={alertmanager.CONFIG_DIR}/{alertmanager.CLUSTER_TLS_CONFIG}",
            *(f"--cluster.peer={peer}" for peer in alertmanager.peer_addresses(ns, ALERTMANAGER_REPLICAS)),
        ],
        "ports": [
            {"name": "web", "containerPort": alertmanager.PORT, "protocol": "TCP"},
            {"name": "cluster", "containerPort": alertmanager.CLUSTER_PORT, "protocol": "TCP"},
        ],
        "resources": k8s.resources("100m", "256Mi"),
        "securityContext": k8s.locked_down(),
        # amtool (in the image) asks the API for the cluster's status with the credential.
        "readinessProbe": _probe(
            "amtool", f"--alertmanager.url=http://localhost:{alertmanager.PORT}", "cluster", "show"
        ),
        "volumeMounts": [
            {"name": "config", "mountPath": alertmanager.CONFIG_DIR, "readOnly": True},
            credential.volume_mount(),
            {"name": "cluster-tls", "mountPath": alertmanager.CLUSTER_TLS_DIR, "readOnly": True},
            {"name": "secrets", "mountPath": alertmanager.SECRETS_DIR, "readOnly": True},
            {"name": "data", "mountPath": "/alertmanager"},
        ],
    }
    pod = k8s.pod_spec(
        [container],
        priority_class=SYSTEM_PRIORITY,
        automountServiceAccountToken=False,
        **k8s.on_system_pool(),
        affinity={
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "labelSelector": {"matchLabels": labels},
                            "topologyKey": "kubernetes.io/hostname",
                        },
                    }
                ]
            }
        },
        volumes=[
            {"name": "config", "configMap": {"name": name}},
            # Never declared by the plan (the receivers' secrets): see docs/monitoring.md "Receivers".
            {"name": "secrets", "secret": {"secretName": alertmanager.RECEIVER_SECRET, "optional": True}},
            credential.volume(),
            # The gossip mesh's certificate, declared by the deploy (components/monitoring_access.py).
            {"name": "cluster-tls", "secret": {"secretName": alertmanager.CLUSTER_TLS_SECRET, "defaultMode": 0o444}},
            # Silences and notification log: replicated between the two replicas by gossip.
            {"name": "data", "emptyDir": {"sizeLimit": "1Gi"}},
        ],
    )
    files = {"alertmanager.yml": text, alertmanager.CLUSTER_TLS_CONFIG: alertmanager.cluster_tls_config()}
    checksum = hashlib.sha256("".join(files.values()).encode()).hexdigest()[:16]
    return [
        k8s.config_map(name, ns, files, app=name),
        stateful_set(
            name,
            ns,
            ALERTMANAGER_REPLICAS,
            pod,
            labels,
            service=name,
            pod_annotations={"supercluster.io/config-sha256": checksum},
            app=name,
        ),
        headless_service(
            name, ns, labels, [("web", alertmanager.PORT), ("cluster", alertmanager.CLUSTER_PORT)], app=name
        ),
    ]


def objects(
    config: ClusterConfig, addresses: AddressPlan, settings: Settings, max_unready_percent: int
) -> list[k8s.Obj]:
    """Every monitoring object; ``max_unready_percent``: the cluster autoscaler's unready guard, alerted on."""
    ns = NAMESPACE
    configs = prometheus_configs(config, addresses, settings)
    rule_sets = rule_files(max_unready_percent)
    # Prometheus keeps its TSDB on the node's local NVMe through a hostPath volume, which baseline refuses:
    # the one add-on namespace above baseline. Tenants get no grant to create pods here.
    namespace = k8s.namespace(ns, PRIVILEGED)
    objs: list[k8s.Obj] = [
        namespace,
        k8s.service_account(SERVICE_ACCOUNT, ns),
        k8s.cluster_role(
            f"supercluster-{NAME}",
            [
                k8s.rule([""], ["nodes"], ["list", "watch"]),
                # The kubelet authorizes /metrics and /metrics/cadvisor as get on nodes/metrics.
                k8s.rule([""], ["nodes/metrics"], ["get"]),
                # The apiserver's, scheduler's and controller-manager's /metrics (delegated authorization).
                {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
            ],
            app=NAME,
        ),
        k8s.binding(
            "ClusterRoleBinding",
            f"supercluster-{NAME}",
            "ClusterRole",
            f"supercluster-{NAME}",
            SERVICE_ACCOUNT,
            ns,
            app=NAME,
        ),
        # Target discovery is namespaced wherever it can be.
        *(
            obj
            for target_ns, rules_ in (
                (SYSTEM_NAMESPACE, [k8s.rule([""], ["pods"], ["list", "watch"])]),
                (ns, [k8s.rule([""], ["pods"], ["list", "watch"])]),
                (
                    "default",
                    [
                        k8s.rule(["discovery.k8s.io"], ["endpointslices"], ["list", "watch"]),
                        k8s.rule([""], ["services", "pods"], ["list", "watch"]),
                    ],
                ),
            )
            for obj in (
                k8s.role(f"supercluster-{NAME}", target_ns, rules_, app=NAME),
                k8s.binding(
                    "RoleBinding",
                    f"supercluster-{NAME}",
                    "Role",
                    f"supercluster-{NAME}",
                    SERVICE_ACCOUNT,
                    ns,
                    ns=target_ns,
                    app=NAME,
                ),
            )
        ),
    ]
    for shard, config_text in configs.items():
        kind = "control-plane" if shard == CONTROL_PLANE_SHARD else "nodes"
        objs += _shard_objects(settings, shard, config_text, rule_sets[kind])
    objs += _alertmanager_objects(settings, config.cluster_name)
    objs += exporters.objects(NAMESPACE)
    objs += grafana.objects(NAMESPACE, list(configs), NAME, PORT, settings.password_rotation)
    return objs
