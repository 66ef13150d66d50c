"""Prometheus and the rules that say the control plane is in trouble before researchers do.

One Prometheus Deployment (a cluster-level reader: the only component here that discovers
targets through the apiserver, with one watch per resource type, never one per node). It
scrapes the apiservers, both etcd clusters, CoreDNS, NodeLocal DNS, the traffic exporters and
the autoscaler. Rules are plain rule files in a ConfigMap (no operator, no CRD):
- apiserver 429 and 5xx rates: the 7,500-node post's "high-level signal of failure";
- apiserver error-budget burn, multi-window and multi-burn-rate as in kubernetes-mixin
  (99% over 30 days; here errors are 5xx *and* 429);
- etcd: backend commit latency, WAL fsync latency, database size against the quota (the
  2,500-node post's outage), predicted growth, leader changes, no leader.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from infra import yaml_text
from infra.addons import cluster_autoscaler, images, k8s, node_local_dns
from infra.addons.labels import SAFE_TO_EVICT, SYSTEM_NAMESPACE, SYSTEM_PRIORITY
from infra.addons.settings import check_go_duration, duration, section
from infra.addressing import AddressPlan
from infra.config import ClusterConfig
from infra.labels import MONITORING_ROLE, ROLE_LABEL

KEY = "monitoring"
NAME = "prometheus"
NAMESPACE = "monitoring"
PORT = 9090
CONFIG_DIR = "/etc/prometheus"
RULES_DIR = f"{CONFIG_DIR}/rules"
ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# etcd serves plain-HTTP /metrics on its --listen-metrics-urls port (etcd op-guide/configuration);
# the etcd VMs listen on this port for the cluster's pods.
ETCD_METRICS_PORT = 2381
# kubernetes-mixin's apiserver availability SLO (config.libsonnet: SLO 99% over 30 days).
APISERVER_SLO = 0.99
# (long window, short window, burn-rate factor, for, severity): kubernetes-mixin kube_apiserver.libsonnet.
BURN_ALERTS = (("1h", "5m", 14.4, "2m", "critical"), ("6h", "30m", 6, "15m", "critical"),
               ("1d", "2h", 3, "1h", "warning"), ("3d", "6h", 1, "3h", "warning"))
# The etcd mixin's thresholds (etcd-io/etcd contrib/mixin/alerts/alerts.libsonnet).
ETCD_COMMIT_P99_SECONDS = 0.25
ETCD_FSYNC_P99_SECONDS = 0.5
ETCD_QUOTA_CRITICAL_PERCENT = 95
ETCD_QUOTA_WARNING_PERCENT = 80  # early warning: compaction and defrag take time at 8 GiB


@dataclass(frozen=True)
class Settings:
    scrape_interval: str = "30s"
    retention: str = "15d"
    storage_gib: int = 200
    memory_gib: int = 16


def parse(raw: Mapping[str, Any], config: ClusterConfig) -> Settings:
    s = section(KEY, raw)
    x = Settings()
    settings = Settings(
        scrape_interval=duration(s, "scrapeInterval", x.scrape_interval, maximum_seconds=300),
        retention=s.string("retention", x.retention, pattern=r"[1-9][0-9]*(h|d|w)",
                           accepted="a retention such as 15d, 2w or 72h"),
        storage_gib=s.integer("storageGiB", x.storage_gib, minimum=10, maximum=10_000),
        memory_gib=s.integer("memoryGiB", x.memory_gib, minimum=2, maximum=1_024),
    )
    s.done()
    check_go_duration(s, "retention", settings.retention)
    return settings


# ----------------------------------------------------------------------------- rules

def _ratio(selector: str, window: str) -> str:
    return (f'sum(rate(apiserver_request_total{{job="apiserver",{selector}}}[{window}])) / '
            f'sum(rate(apiserver_request_total{{job="apiserver"}}[{window}]))')


def rule_files() -> dict[str, str]:
    windows = sorted({w for alert in BURN_ALERTS for w in alert[:2]}, key=_window_seconds)
    budget = round(1 - APISERVER_SLO, 6)
    throttled, failed = _ratio('code="429"', "5m"), _ratio('code=~"5.."', "5m")
    apiserver = {"groups": [
        {"name": "apiserver-errors.rules", "rules": [
            *({"record": f"apiserver_request:error_ratio_rate{w}", "expr": _ratio('code=~"5..|429"', w)}
              for w in windows),
        ]},
        {"name": "apiserver-errors", "rules": [
            {"alert": "APIServerThrottling", "expr": f"{throttled} > 0.01", "for": "10m",
             "labels": {"severity": "warning"},
             "annotations": {"summary": "More than 1% of apiserver requests are rejected with 429.",
                             "description": "Clients are being throttled (APF or max-requests-inflight); "
                                            "look for a client whose load grows with the cluster."}},
            {"alert": "APIServerErrors", "expr": f"{failed} > 0.01", "for": "10m",
             "labels": {"severity": "warning"},
             "annotations": {"summary": "More than 1% of apiserver requests fail with 5xx."}},
            {"alert": "APIServerErrorsHigh", "expr": f"{failed} > 0.05", "for": "5m",
             "labels": {"severity": "critical"},
             "annotations": {"summary": "More than 5% of apiserver requests fail with 5xx."}},
            *({"alert": "APIServerErrorBudgetBurn",
               "expr": f"apiserver_request:error_ratio_rate{long} > ({factor} * {budget}) and "
                       f"apiserver_request:error_ratio_rate{short} > ({factor} * {budget})",
               "for": wait, "labels": {"severity": severity, "long": long, "short": short},
               "annotations": {"summary": f"The apiserver is burning its {APISERVER_SLO:.0%} availability "
                                          f"budget {factor}x too fast ({long}/{short} windows)."}}
              for long, short, factor, wait, severity in BURN_ALERTS),
        ]},
    ]}
    etcd = {"groups": [{"name": "etcd", "rules": [
        {"alert": "EtcdNoLeader", "expr": "etcd_server_has_leader == 0", "for": "1m",
         "labels": {"severity": "critical"}, "annotations": {"summary": "An etcd member has no leader."}},
        {"alert": "EtcdMembersDown", "expr": 'up{job=~"etcd-.*"} == 0', "for": "3m",
         "labels": {"severity": "critical"}, "annotations": {"summary": "An etcd member cannot be scraped."}},
        {"alert": "EtcdHighNumberOfLeaderChanges",
         "expr": "increase((max without (instance) (etcd_server_leader_changes_seen_total))[15m:1m]) >= 4",
         "for": "5m", "labels": {"severity": "warning"},
         "annotations": {"summary": "etcd changed leader 4+ times in 15 minutes (disk or network latency)."}},
        {"alert": "EtcdHighCommitDurations",
         "expr": "histogram_quantile(0.99, sum by (job, instance, le) "
                 f"(rate(etcd_disk_backend_commit_duration_seconds_bucket[5m]))) > {ETCD_COMMIT_P99_SECONDS}",
         "for": "10m", "labels": {"severity": "warning"},
         "annotations": {"summary": "etcd backend commit p99 is above 250ms (local SSD gives ~200us)."}},
        {"alert": "EtcdHighFsyncDurations",
         "expr": "histogram_quantile(0.99, sum by (job, instance, le) "
                 f"(rate(etcd_disk_wal_fsync_duration_seconds_bucket[5m]))) > {ETCD_FSYNC_P99_SECONDS}",
         "for": "10m", "labels": {"severity": "warning"},
         "annotations": {"summary": "etcd WAL fsync p99 is above 500ms."}},
        *({"alert": name,
           "expr": "(last_over_time(etcd_mvcc_db_total_size_in_bytes[5m]) / "
                   f"last_over_time(etcd_server_quota_backend_bytes[5m])) * 100 > {percent}",
           "for": "10m", "labels": {"severity": severity},
           "annotations": {"summary": f"etcd's database is above {percent}% of its quota; at 100% etcd "
                                      "stops taking writes (compact, defrag, then disarm the alarm)."}}
          for name, percent, severity in (("EtcdDatabaseQuotaLowSpace", ETCD_QUOTA_CRITICAL_PERCENT, "critical"),
                                          ("EtcdDatabaseQuotaFilling", ETCD_QUOTA_WARNING_PERCENT, "warning"))),
        {"alert": "EtcdExcessiveDatabaseGrowth",
         "expr": "predict_linear(etcd_mvcc_db_total_size_in_bytes[4h], 4 * 60 * 60) > "
                 "etcd_server_quota_backend_bytes",
         "for": "10m", "labels": {"severity": "warning"},
         "annotations": {"summary": "At its current growth etcd's database reaches its quota within 4 hours."}},
    ]}]}
    return {"apiserver.yaml": _dump(apiserver), "etcd.yaml": _dump(etcd)}


def _window_seconds(window: str) -> int:
    return int(window[:-1]) * {"m": 60, "h": 3600, "d": 86_400}[window[-1]]


def _dump(document: Any) -> str:
    return yaml_text.dump(document, sort_keys=False, default_flow_style=False, width=120)


# ----------------------------------------------------------------------------- scrape config

def _node_job(job: str, port: int, keep: str | None = None) -> dict[str, Any]:
    """Scrape a host-network agent on every node: the node's address with the agent's port."""
    config: dict[str, Any] = {
        "job_name": job, "kubernetes_sd_configs": [{"role": "node"}],
        "relabel_configs": [
            {"source_labels": ["__address__"], "regex": "(.+):[0-9]+", "replacement": f"${{1}}:{port}",
             "target_label": "__address__"},
            {"source_labels": ["__meta_kubernetes_node_name"], "target_label": "node"},
            {"source_labels": [f"__meta_kubernetes_node_label_{_label_name(ROLE_LABEL)}"], "target_label": "role"},
        ],
    }
    if keep:
        config["metric_relabel_configs"] = [{"source_labels": ["__name__"], "regex": keep, "action": "keep"}]
    return config


def _pod_job(job: str, namespace: str, selector: str, port_name: str) -> dict[str, Any]:
    return {
        "job_name": job,
        "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [namespace]},
                                   "selectors": [{"role": "pod", "label": selector}]}],
        "relabel_configs": [
            {"source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": port_name, "action": "keep"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        ],
    }


def _label_name(label: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in label)


def prometheus_config(config: ClusterConfig, addresses: AddressPlan, settings: Settings,
                      iptables_exporter_port: int) -> str:
    etcd = {"etcd-main": addresses.etcd_ips("etcd", config.etcd.members),
            "etcd-events": addresses.etcd_ips("events-etcd", config.events_etcd.members)}
    document = {
        "global": {"scrape_interval": settings.scrape_interval, "evaluation_interval": settings.scrape_interval,
                   "external_labels": {"cluster": config.cluster_name}},
        "rule_files": [f"{RULES_DIR}/*.yaml"],
        "scrape_configs": [
            {"job_name": "apiserver", "scheme": "https",
             "kubernetes_sd_configs": [{"role": "endpointslice", "namespaces": {"names": ["default"]}}],
             "authorization": {"credentials_file": f"{ACCOUNT_DIR}/token"},
             "tls_config": {"ca_file": f"{ACCOUNT_DIR}/ca.crt"},
             "relabel_configs": [{"source_labels": ["__meta_kubernetes_service_name",
                                                    "__meta_kubernetes_endpointslice_port_name"],
                                  "regex": "kubernetes;https", "action": "keep"}]},
            *({"job_name": job, "static_configs": [{"targets": [f"{ip}:{ETCD_METRICS_PORT}" for ip in ips]}]}
              for job, ips in etcd.items()),
            _pod_job("coredns", SYSTEM_NAMESPACE, "k8s-app=kube-dns", "metrics"),
            _pod_job("cluster-autoscaler", SYSTEM_NAMESPACE, f"app={cluster_autoscaler.NAME}", "metrics"),
            _node_job("node-local-dns", node_local_dns.METRICS_PORT),
            _node_job("iptables-exporter", iptables_exporter_port,
                      keep="iptables_rule_.*|iptables_exporter_.*"),
        ],
    }
    return _dump(document)


# ----------------------------------------------------------------------------- objects

def objects(config: ClusterConfig, addresses: AddressPlan, settings: Settings,
            iptables_exporter_port: int) -> list[k8s.Obj]:
    ns = NAMESPACE
    config_text = prometheus_config(config, addresses, settings, iptables_exporter_port)
    rules = rule_files()
    checksum = hashlib.sha256((config_text + "".join(rules.values())).encode()).hexdigest()[:16]
    container = {
        "name": NAME, "image": images.PROMETHEUS,
        "args": [f"--config.file={CONFIG_DIR}/prometheus.yml", "--storage.tsdb.path=/prometheus",
                 f"--storage.tsdb.retention.time={settings.retention}",
                 # Leave room below the volume's limit so kubelet never evicts the pod for it.
                 f"--storage.tsdb.retention.size={int(settings.storage_gib * 0.85)}GB"],
        "ports": [{"name": "web", "containerPort": PORT, "protocol": "TCP"}],
        "resources": k8s.resources("1", f"{settings.memory_gib}Gi"),
        "securityContext": k8s.locked_down(),
        "readinessProbe": {"httpGet": {"path": "/-/ready", "port": PORT}},
        "livenessProbe": {"httpGet": {"path": "/-/healthy", "port": PORT}, "initialDelaySeconds": 300},
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "rules", "mountPath": RULES_DIR, "readOnly": True},
            {"name": "data", "mountPath": "/prometheus"},
        ],
    }
    pod = k8s.pod_spec(
        [container], priority_class=SYSTEM_PRIORITY, service_account=NAME,
        nodeSelector={ROLE_LABEL: MONITORING_ROLE},
        securityContext={"fsGroup": 65534, **k8s.RUNTIME_DEFAULT_SECCOMP},
        volumes=[
            {"name": "config", "configMap": {"name": NAME}},
            {"name": "rules", "configMap": {"name": f"{NAME}-rules"}},
            # The node's local SSD: no CSI driver is needed, and losing history on a reschedule
            # is acceptable for alerting (not for capacity planning: remote-write for that).
            {"name": "data", "emptyDir": {"sizeLimit": f"{settings.storage_gib}Gi"}},
        ],
    )
    return [
        k8s.namespace(ns, "restricted"),
        k8s.service_account(NAME, ns),
        k8s.cluster_role(f"supercluster-{NAME}", [
            k8s.rule([""], ["nodes"], ["list", "watch"]),
            {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
        ], app=NAME),
        k8s.binding("ClusterRoleBinding", f"supercluster-{NAME}", "ClusterRole", f"supercluster-{NAME}", NAME, ns,
                    app=NAME),
        # Target discovery is namespaced wherever it can be.
        k8s.role(f"supercluster-{NAME}", SYSTEM_NAMESPACE, [k8s.rule([""], ["pods"], ["list", "watch"])], app=NAME),
        k8s.binding("RoleBinding", f"supercluster-{NAME}", "Role", f"supercluster-{NAME}", NAME, ns,
                    ns=SYSTEM_NAMESPACE, app=NAME),
        k8s.role(f"supercluster-{NAME}", "default", [
            k8s.rule(["discovery.k8s.io"], ["endpointslices"], ["list", "watch"]),
            k8s.rule([""], ["services", "pods"], ["list", "watch"]),
        ], app=NAME),
        k8s.binding("RoleBinding", f"supercluster-{NAME}", "Role", f"supercluster-{NAME}", NAME, ns,
                    ns="default", app=NAME),
        k8s.config_map(NAME, ns, {"prometheus.yml": config_text}),
        k8s.config_map(f"{NAME}-rules", ns, rules, app=NAME),
        k8s.deployment(NAME, ns, 1, pod, {"app.kubernetes.io/name": NAME}, strategy={"type": "Recreate"},
                       pod_annotations={SAFE_TO_EVICT: "false", "supercluster.io/config-sha256": checksum}),
        {"apiVersion": "v1", "kind": "Service", "metadata": k8s.metadata(NAME, ns),
         "spec": {"selector": {"app.kubernetes.io/name": NAME},
                  "ports": [{"name": "web", "port": PORT, "protocol": "TCP", "targetPort": PORT}]}},
    ]
