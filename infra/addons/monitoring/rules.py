"""The alerts that page a human, as Prometheus rule files, split by the shard that holds the data.

Control-plane rules run on the control-plane shard (apiserver, scheduler, controller-manager, etcd,
CoreDNS, the autoscaler,
kube-state-metrics, the etcd backups, Alertmanager); node rules run on every node shard, each over its own
share of the nodes (NodeLocal DNS, kubelet certificates, DCGM, node-exporter on the NAT hosts).
Every shard watches its own Prometheus replicas and the other shards' liveness.
Every alert has a runbook row in docs/monitoring.md and a firing and a silent ``promtool test
rules`` case in tests/infra/test_monitoring_rules.py. Metric names and thresholds are facts with
their source beside them; the expressions are this project's own.
"""

from __future__ import annotations

from typing import Any

from infra.boot import yaml_text
from infra.etcd import backup, backup_metrics
from infra.facts import bootstrap_token
from infra.facts.labels import GPU_STARTUP_TAINT_KEY, ROLE_NAT_HOST
from infra.network.traffic_counters import AZURE_PLATFORM

CONTROL_PLANE_FILE = "control-plane.yaml"
NODES_FILE = "nodes.yaml"

# Job names: the scrape configuration (scrape.py) and the rules share them.
JOB_APISERVER = "apiserver"
JOB_ETCD = {"main": "etcd-main", "events": "etcd-events"}
JOB_ETCD_BACKUP = "etcd-backup"
JOB_SCHEDULER = "kube-scheduler"
JOB_CONTROLLER_MANAGER = "kube-controller-manager"
JOB_TOKEN_MINTER = "token-minter"
JOB_COREDNS = "coredns"
JOB_AUTOSCALER = "cluster-autoscaler"
JOB_KUBE_STATE_METRICS = "kube-state-metrics"
JOB_NODE_EXPORTER = "node-exporter"
JOB_KUBELET = "kubelet"
JOB_CADVISOR = "cadvisor"
JOB_DCGM = "dcgm-exporter"
JOB_NODE_LOCAL_DNS = "node-local-dns"
JOB_IPTABLES = "iptables-exporter"
# The monitoring stack watching itself: each shard scrapes its own replicas (JOB_PROMETHEUS), the
# control-plane shard the Alertmanager replicas, and the shards each other's liveness
# (JOB_PROMETHEUS_PEERS: the control-plane shard every node shard's replicas, every node shard the
# control-plane shard's), so a shard with no replica up is seen by a shard that is not it.
JOB_PROMETHEUS = "prometheus"
JOB_PROMETHEUS_PEERS = "prometheus-peers"
JOB_ALERTMANAGER = "alertmanager"

# kubernetes-mixin's apiserver availability SLO (config.libsonnet: SLO 99% over 30 days).
APISERVER_SLO = 0.99
# (long window, short window, burn-rate factor, for, severity): kubernetes-mixin kube_apiserver.libsonnet.
BURN_ALERTS = (
    ("1h", "5m", 14.4, "2m", "critical"),
    ("6h", "30m", 6, "15m", "critical"),
    ("1d", "2h", 3, "1h", "warning"),
    ("3d", "6h", 1, "3h", "warning"),
)
# Kubernetes' API call latency SLO: p99 of mutating and single-object read calls <= 1 s
# (kubernetes/community sig-scalability/slos/api_call_latency.md).
APISERVER_LATENCY_P99_SECONDS = 1
# The etcd mixin's thresholds (etcd-io/etcd contrib/mixin/alerts/alerts.libsonnet).
ETCD_COMMIT_P99_SECONDS = 0.25
ETCD_FSYNC_P99_SECONDS = 0.5
# The minters mint once the token in Key Vault is PERIOD_SECONDS old; an hour past that they are failing. Nodes
# stop joining once it is LIFETIME_SECONDS old: paged four hours before.
TOKEN_MINT_OVERDUE_SECONDS = bootstrap_token.PERIOD_SECONDS + 3600
TOKEN_EXPIRING_SECONDS = bootstrap_token.LIFETIME_SECONDS - 4 * 3600
ETCD_QUOTA_CRITICAL_PERCENT = 95
ETCD_QUOTA_WARNING_PERCENT = 80  # early warning: compaction and defrag take time at 8 GiB
# A snapshot is uploaded every SNAPSHOT_SCHEDULE (infra/etcd/backup.py "*:0/30"): three missed in a row pages.
BACKUP_INTERVAL_SECONDS = int(backup.SNAPSHOT_SCHEDULE.rsplit("/", 1)[1]) * 60
BACKUP_STALE_SECONDS = 3 * BACKUP_INTERVAL_SECONDS
# Azure DNS answers about 200 queries per second from one VM (the 2,500-node post: "the ~200QPS
# that's allowed from each Azure VM for external domains lookups"); warn at three quarters of it.
AZURE_DNS = AZURE_PLATFORM.split("/")[0]
AZURE_DNS_QPS_LIMIT = 200
AZURE_DNS_QPS_WARNING = int(AZURE_DNS_QPS_LIMIT * 0.75)
DNS_SERVFAIL_RATIO = 0.01
# A GPU node's health check lifts the start-up taint within minutes of boot; half an hour means
# the GPUs failed their checks (or the check never ran) and the node is paid for, unused.
GPU_TAINT_STUCK_FOR = "30m"
# Certificates: a week's warning, a day's page (kubelet client certificates rotate at ~70-90% of life).
CERT_WARNING_SECONDS = 7 * 86_400
CERT_CRITICAL_SECONDS = 86_400
# Conntrack on a NAT host: every pod-to-service flow through it holds an entry.
NAT_CONNTRACK_RATIO = 0.8
# Notifications Alertmanager fails to deliver, and alerts Prometheus fails to hand to an Alertmanager:
# above 1% for long enough to outlast a receiver's or a replica's restart.
NOTIFICATION_FAILED_RATIO = 0.01


def _alert(name: str, expr: str, wait: str, severity: str, summary: str, **labels: str) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": wait,
        "labels": {"severity": severity, **labels},
        "annotations": {"summary": summary, "runbook": f"docs/monitoring.md#{name.lower()}"},
    }


def _ratio(selector: str, window: str) -> str:
    return (
        f'sum(rate(apiserver_request_total{{job="{JOB_APISERVER}",{selector}}}[{window}])) / '
        f'sum(rate(apiserver_request_total{{job="{JOB_APISERVER}"}}[{window}]))'
    )


def _window_seconds(window: str) -> int:
    return int(window[:-1]) * {"m": 60, "h": 3600, "d": 86_400}[window[-1]]


def apiserver_rules() -> list[dict[str, Any]]:
    windows = sorted({w for alert in BURN_ALERTS for w in alert[:2]}, key=_window_seconds)
    budget = round(1 - APISERVER_SLO, 6)
    throttled, failed = _ratio('code="429"', "5m"), _ratio('code=~"5.."', "5m")
    latency = (
        "histogram_quantile(0.99, sum by (verb, le) (rate(apiserver_request_duration_seconds_bucket"
        f'{{job="{JOB_APISERVER}",verb!~"LIST|WATCH|CONNECT",subresource!~"log|exec|portforward|attach|proxy"}}'
        f"[5m]))) > {APISERVER_LATENCY_P99_SECONDS}"
    )
    return [
        {
            "name": "apiserver-errors.rules",
            "rules": [
                {"record": f"apiserver_request:error_ratio_rate{w}", "expr": _ratio('code=~"5..|429"', w)}
                for w in windows
            ],
        },
        {
            "name": "apiserver",
            "rules": [
                _alert(
                    "APIServerThrottling",
                    f"{throttled} > 0.01",
                    "10m",
                    "warning",
                    "More than 1% of apiserver requests are rejected with 429: a client's load grows with the cluster.",
                ),
                _alert(
                    "APIServerErrors",
                    f"{failed} > 0.01",
                    "10m",
                    "warning",
                    "More than 1% of apiserver requests fail with 5xx.",
                ),
                _alert(
                    "APIServerErrorsHigh",
                    f"{failed} > 0.05",
                    "5m",
                    "critical",
                    "More than 5% of apiserver requests fail with 5xx.",
                ),
                *(
                    _alert(
                        "APIServerErrorBudgetBurn",
                        f"apiserver_request:error_ratio_rate{long} > ({factor} * {budget}) and "
                        f"apiserver_request:error_ratio_rate{short} > ({factor} * {budget})",
                        wait,
                        severity,
                        f"The apiserver burns its {APISERVER_SLO:.0%} availability budget {factor}x "
                        f"too fast ({long}/{short} windows).",
                        long=long,
                        short=short,
                    )
                    for long, short, factor, wait, severity in BURN_ALERTS
                ),
                _alert(
                    "APIServerLatencyHigh",
                    latency,
                    "10m",
                    "warning",
                    f"p99 latency of single-object API calls is above {APISERVER_LATENCY_P99_SECONDS}s (Kubernetes' SLO).",
                ),
            ],
        },
    ]


def component_rules() -> list[dict[str, Any]]:
    """kube-scheduler and kube-controller-manager run on every apiserver VM, leader-elected
    (``--leader-elect``: one instance works, the others stand by), so the cluster lacks one only when
    no instance answers:
    ``absent(up == 1)`` is empty while any target of the job is up, and also fires when the job has
    no target at all."""
    return [
        {
            "name": "control-plane-components",
            "rules": [
                _alert(
                    "KubeSchedulerDown",
                    f'absent(up{{job="{JOB_SCHEDULER}"}} == 1)',
                    "5m",
                    "critical",
                    "No kube-scheduler answers: new pods stay Pending.",
                ),
                _alert(
                    "KubeControllerManagerDown",
                    f'absent(up{{job="{JOB_CONTROLLER_MANAGER}"}} == 1)',
                    "5m",
                    "critical",
                    "No kube-controller-manager answers: no ReplicaSet, node lifecycle or kubelet CSR is handled.",
                ),
                # One instance down while another answers: nothing stops, but the standby a leader failover
                # needs is gone; a warning, so it is mended before the next apiserver VM is rolled.
                _alert(
                    "ControlPlaneComponentInstanceDown",
                    f'up{{job=~"{JOB_SCHEDULER}|{JOB_CONTROLLER_MANAGER}"}} == 0',
                    "15m",
                    "warning",
                    "One kube-scheduler or kube-controller-manager instance does not answer: its failover is gone.",
                ),
            ],
        },
        {
            # Every apiserver's minter publishes the mint time of the token in Key Vault (the Lease's), so the
            # newest across them is the cluster's; a copy that cannot read the Lease keeps its last value.
            "name": "bootstrap-token-minter",
            "rules": [
                _alert(
                    "BootstrapTokenMintOverdue",
                    f"time() - max({bootstrap_token.MINTED_METRIC}) > {TOKEN_MINT_OVERDUE_SECONDS}",
                    "10m",
                    "warning",
                    "No bootstrap token was minted for an hour past its period: the minters are failing, and new"
                    " nodes stop joining when the token in Key Vault expires.",
                ),
                _alert(
                    "BootstrapTokenExpiring",
                    f"time() - max({bootstrap_token.MINTED_METRIC}) > {TOKEN_EXPIRING_SECONDS}",
                    "5m",
                    "critical",
                    "The bootstrap token in Key Vault expires within four hours and no new one was minted: new"
                    " nodes then stop joining.",
                ),
                _alert(
                    "BootstrapTokenMinterMetricsMissing",
                    f'up{{job="{JOB_TOKEN_MINTER}"}} == 0 or on () absent({bootstrap_token.MINTED_METRIC})',
                    "15m",
                    "warning",
                    "A token minter does not publish the mint time (or none does), so a stopped minter would not page.",
                ),
            ],
        },
    ]


def etcd_rules() -> list[dict[str, Any]]:
    jobs = "|".join(JOB_ETCD.values())
    return [
        {
            "name": "etcd",
            "rules": [
                _alert(
                    "EtcdNoLeader",
                    f'etcd_server_has_leader{{job=~"{jobs}"}} == 0',
                    "1m",
                    "critical",
                    "An etcd member has no leader.",
                ),
                _alert(
                    "EtcdMemberDown", f'up{{job=~"{jobs}"}} == 0', "3m", "critical", "An etcd member cannot be scraped."
                ),
                _alert(
                    "EtcdHighNumberOfLeaderChanges",
                    f'increase((max without (instance) (etcd_server_leader_changes_seen_total{{job=~"{jobs}"}}))[15m:1m]) >= 4',
                    "5m",
                    "warning",
                    "etcd changed leader 4+ times in 15 minutes (disk or network latency).",
                ),
                _alert(
                    "EtcdHighCommitDurations",
                    "histogram_quantile(0.99, sum by (job, instance, le) "
                    f'(rate(etcd_disk_backend_commit_duration_seconds_bucket{{job=~"{jobs}"}}[5m]))) > {ETCD_COMMIT_P99_SECONDS}',
                    "10m",
                    "warning",
                    "etcd backend commit p99 is above 250ms (local SSD gives ~200us).",
                ),
                _alert(
                    "EtcdHighFsyncDurations",
                    "histogram_quantile(0.99, sum by (job, instance, le) "
                    f'(rate(etcd_disk_wal_fsync_duration_seconds_bucket{{job=~"{jobs}"}}[5m]))) > {ETCD_FSYNC_P99_SECONDS}',
                    "10m",
                    "warning",
                    "etcd WAL fsync p99 is above 500ms.",
                ),
                *(
                    _alert(
                        name,
                        f'(last_over_time(etcd_mvcc_db_total_size_in_bytes{{job=~"{jobs}"}}[5m]) / '
                        f'last_over_time(etcd_server_quota_backend_bytes{{job=~"{jobs}"}}[5m])) * 100 > {percent}',
                        "10m",
                        severity,
                        f"etcd's database is above {percent}% of its quota; at 100% etcd stops taking "
                        "writes (compact, defrag, then disarm the alarm).",
                    )
                    for name, percent, severity in (
                        ("EtcdDatabaseQuotaLowSpace", ETCD_QUOTA_CRITICAL_PERCENT, "critical"),
                        ("EtcdDatabaseQuotaFilling", ETCD_QUOTA_WARNING_PERCENT, "warning"),
                    )
                ),
                _alert(
                    "EtcdExcessiveDatabaseGrowth",
                    f'predict_linear(etcd_mvcc_db_total_size_in_bytes{{job=~"{jobs}"}}[4h], 4 * 60 * 60) > '
                    f'etcd_server_quota_backend_bytes{{job=~"{jobs}"}}',
                    "10m",
                    "warning",
                    "At its current growth etcd's database reaches its quota within 4 hours.",
                ),
                # The backup series' own label "cluster" (main or events) is renamed etcd_cluster at scrape
                # time (shards.py), so it never hides the Kubernetes cluster's external label.
                _alert(
                    "EtcdBackupStale",
                    f"time() - max by (etcd_cluster) ({backup_metrics.LAST_SUCCESS_METRIC}) > {BACKUP_STALE_SECONDS}",
                    "5m",
                    "critical",
                    "The newest etcd snapshot in the backup container is older than three backup intervals.",
                ),
                _alert(
                    "EtcdBackupMetricsMissing",
                    f'up{{job="{JOB_ETCD_BACKUP}"}} == 0 or on () absent({backup_metrics.LAST_SUCCESS_METRIC})',
                    "15m",
                    "warning",
                    "An etcd machine does not publish the backup age (or none does), so a stale backup would not page.",
                ),
            ],
        }
    ]


def node_state_rules(max_unready_percent: int) -> list[dict[str, Any]]:
    ksm = f'job="{JOB_KUBE_STATE_METRICS}"'
    return [
        {
            "name": "nodes",
            "rules": [
                _alert(
                    "NodeNotReady",
                    f'kube_node_status_condition{{{ksm},condition="Ready",status="true"}} == 0',
                    "15m",
                    "warning",
                    "A node has not been Ready for 15 minutes.",
                ),
                _alert(
                    "NodesNotReadyMany",
                    f'count(kube_node_status_condition{{{ksm},condition="Ready",status="true"}} == 0) / '
                    f'count(kube_node_status_condition{{{ksm},condition="Ready",status="true"}}) * 100 '
                    f"> {max_unready_percent // 2}",
                    "5m",
                    "critical",
                    "Half the autoscaler's unready guard is reached: a network or control-plane "
                    "failure, not node churn.",
                ),
                # cluster-autoscaler metrics (FAQ "What metrics does CA expose"): 0 while the unready guard
                # (--max-total-unready-percentage / --ok-total-unready-count) holds scaling.
                _alert(
                    "ClusterAutoscalerHalted",
                    f'cluster_autoscaler_cluster_safe_to_autoscale{{job="{JOB_AUTOSCALER}"}} == 0',
                    "10m",
                    "critical",
                    "The cluster autoscaler stopped scaling: too many nodes are unready.",
                ),
                _alert(
                    "ClusterAutoscalerDown",
                    f'up{{job="{JOB_AUTOSCALER}"}} == 0 or absent(up{{job="{JOB_AUTOSCALER}"}})',
                    "10m",
                    "warning",
                    "The cluster autoscaler is not running: pending pods add no nodes.",
                ),
                _alert(
                    "GPUStartupTaintNotLifted",
                    f'kube_node_spec_taint{{{ksm},key="{GPU_STARTUP_TAINT_KEY}"}} == 1',
                    GPU_TAINT_STUCK_FOR,
                    "warning",
                    "A GPU node still carries the start-up taint: its GPUs failed the health check or it never ran.",
                ),
                _alert(
                    "CoreDNSErrors",
                    _servfail(JOB_COREDNS),
                    "10m",
                    "critical",
                    "More than 1% of CoreDNS answers are SERVFAIL.",
                ),
                _alert(
                    "CoreDNSUpstreamRateNearAzureLimit",
                    _azure_dns_rate(JOB_COREDNS),
                    "10m",
                    "warning",
                    f"A node's CoreDNS sends more than {AZURE_DNS_QPS_WARNING} queries/s to Azure DNS "
                    f"(limit about {AZURE_DNS_QPS_LIMIT} per VM).",
                ),
                _alert(
                    "APIServerClientCertificateExpiring",
                    f'apiserver_client_certificate_expiration_seconds_count{{job="{JOB_APISERVER}"}} > 0 and on (job) '
                    "histogram_quantile(0.01, sum by (job, le) (rate(apiserver_client_certificate_expiration_seconds_bucket"
                    f'{{job="{JOB_APISERVER}"}}[5m]))) < {CERT_WARNING_SECONDS}',
                    "5m",
                    "warning",
                    "A client authenticates to the apiserver with a certificate expiring within 7 days.",
                ),
            ],
        }
    ]


def _servfail(job: str) -> str:
    return (
        f'sum by (job, node) (rate(coredns_dns_responses_total{{job="{job}",rcode="SERVFAIL"}}[5m])) / '
        f'sum by (job, node) (rate(coredns_dns_responses_total{{job="{job}"}}[5m])) > {DNS_SERVFAIL_RATIO}'
    )


def _azure_dns_rate(job: str) -> str:
    # CoreDNS 1.11+ counts forwarded queries in the proxy package's histogram (label to="IP:port").
    return (
        f'sum by (job, node) (rate(coredns_proxy_request_duration_seconds_count{{job="{job}",'
        f'to="{AZURE_DNS}:53"}}[5m])) > {AZURE_DNS_QPS_WARNING}'
    )


def node_rules() -> list[dict[str, Any]]:
    nat = f'job="{JOB_NODE_EXPORTER}",role="{ROLE_NAT_HOST}"'
    return [
        {
            "name": "node-agents",
            "rules": [
                _alert(
                    "NodeLocalDNSErrors",
                    _servfail(JOB_NODE_LOCAL_DNS),
                    "10m",
                    "warning",
                    "More than 1% of a node's NodeLocal DNS answers are SERVFAIL.",
                ),
                _alert(
                    "NodeUpstreamDNSRateNearAzureLimit",
                    _azure_dns_rate(JOB_NODE_LOCAL_DNS),
                    "10m",
                    "warning",
                    f"A node sends more than {AZURE_DNS_QPS_WARNING} queries/s to Azure DNS "
                    f"(limit about {AZURE_DNS_QPS_LIMIT} per VM).",
                ),
                # DCGM_FI_DEV_XID_ERRORS: the value of the last XID error (dcgm-exporter default counters).
                _alert(
                    "GPUXidError",
                    f'max_over_time(DCGM_FI_DEV_XID_ERRORS{{job="{JOB_DCGM}"}}[10m]) > 0',
                    "0m",
                    "warning",
                    "A GPU reported an XID error in the last 10 minutes (see the XID code in the value).",
                ),
                # kubelet_certificate_manager_client_ttl_seconds: seconds until the kubelet's client
                # certificate expires (kubernetes cmd/kubelet/app/server.go).
                _alert(
                    "KubeletClientCertificateExpiring",
                    f'kubelet_certificate_manager_client_ttl_seconds{{job="{JOB_KUBELET}"}} < {CERT_WARNING_SECONDS}',
                    "5m",
                    "warning",
                    "A kubelet's client certificate expires within 7 days and was not rotated.",
                ),
                _alert(
                    "KubeletClientCertificateExpiringSoon",
                    f'kubelet_certificate_manager_client_ttl_seconds{{job="{JOB_KUBELET}"}} < {CERT_CRITICAL_SECONDS}',
                    "5m",
                    "critical",
                    "A kubelet's client certificate expires within a day: the node will drop out.",
                ),
                _alert(
                    "KubeletCertificateRenewErrors",
                    f'increase(kubelet_certificate_manager_client_expiration_renew_errors{{job="{JOB_KUBELET}"}}[15m]) > 0',
                    "15m",
                    "warning",
                    "A kubelet fails to renew its client certificate.",
                ),
                _alert(
                    "NATHostDown",
                    f"up{{{nat}}} == 0",
                    "2m",
                    "critical",
                    "A NAT host does not answer: pods relying on it lose service traffic.",
                ),
                # node-exporter's conntrack collector: entries and the kernel's limit.
                _alert(
                    "NATHostConntrackFull",
                    f"node_nf_conntrack_entries{{{nat}}} / node_nf_conntrack_entries_limit{{{nat}}} > {NAT_CONNTRACK_RATIO}",
                    "5m",
                    "critical",
                    "A NAT host's conntrack table is 80% full: new connections will be dropped.",
                ),
            ],
        }
    ]


def prometheus_rules() -> list[dict[str, Any]]:
    """Every shard, over its own replicas (its job JOB_PROMETHEUS) and the other shards' liveness
    (JOB_PROMETHEUS_PEERS). A replica that cannot reach Alertmanager cannot send the alert about
    it either: its twin in the same shard scrapes it and sends it, so these hold per ``instance``."""
    own = f'job="{JOB_PROMETHEUS}"'
    return [
        {
            "name": "prometheus",
            "rules": [
                # A rule that fails to evaluate cannot fire for what it watches, and nothing else
                # says so: critical, once it has outlasted a restart's transient errors.
                _alert(
                    "PrometheusRuleEvaluationFailures",
                    f"increase(prometheus_rule_evaluation_failures_total{{{own}}}[5m]) > 0",
                    "15m",
                    "critical",
                    "A Prometheus fails to evaluate rules: the alerts of that group cannot fire.",
                ),
                # The alerting configuration names the Alertmanagers statically (their StatefulSet
                # DNS names), so 0 means the configuration lost them; failing to reach them shows in
                # PrometheusErrorSendingAlerts and PrometheusNotificationsDropped.
                _alert(
                    "PrometheusNotConnectedToAlertmanagers",
                    f"max_over_time(prometheus_notifications_alertmanagers_discovered{{{own}}}[5m]) < 1",
                    "10m",
                    "critical",
                    "A Prometheus knows no Alertmanager: its alerts go nowhere.",
                ),
                # One Alertmanager failing leaves the other delivering (each alert goes to both): a warning.
                _alert(
                    "PrometheusErrorSendingAlerts",
                    f"sum by (instance, alertmanager) (rate(prometheus_notifications_errors_total{{{own}}}[5m])) / "
                    f"sum by (instance, alertmanager) (rate(prometheus_notifications_sent_total{{{own}}}[5m])) "
                    f"> {NOTIFICATION_FAILED_RATIO}",
                    "15m",
                    "warning",
                    "A Prometheus fails to send alerts to one Alertmanager.",
                ),
                # Dropped: no Alertmanager took a batch, or the queue overflowed; those alerts are lost.
                _alert(
                    "PrometheusNotificationsDropped",
                    f"increase(prometheus_notifications_dropped_total{{{own}}}[5m]) > 0",
                    "10m",
                    "critical",
                    "A Prometheus drops alerts: no Alertmanager took them or its queue is full.",
                ),
                # The labels carry the shard watched (the target's ``shard``), so the alerts every node
                # shard sends about the control-plane shard are one alert to Alertmanager.
                _alert(
                    "PrometheusShardDown",
                    f'max by (shard) (up{{job="{JOB_PROMETHEUS_PEERS}"}}) == 0',
                    "5m",
                    "critical",
                    "No replica of a Prometheus shard answers: what it watches cannot page.",
                ),
            ],
        }
    ]


def alertmanager_rules() -> list[dict[str, Any]]:
    """On the control-plane shard, which scrapes both Alertmanager replicas. An alert that receivers
    fail may reach no one through that same receiver: a second receiver of another type is the
    mitigation (docs/runbooks/monitoring-not-paging.md)."""
    am = f'job="{JOB_ALERTMANAGER}"'
    return [
        {
            "name": "alertmanager",
            "rules": [
                # Summed over the replicas (the pair sends each notification once, from either).
                _alert(
                    "AlertmanagerFailedToSendNotifications",
                    f"sum by (integration) (rate(alertmanager_notifications_failed_total{{{am}}}[5m])) / "
                    f"sum by (integration) (rate(alertmanager_notifications_total{{{am}}}[5m])) "
                    f"> {NOTIFICATION_FAILED_RATIO}",
                    "10m",
                    "critical",
                    "Alertmanager fails to deliver notifications through an integration: nobody hears those alerts.",
                ),
                # The other replica keeps delivering: a warning, not a page.
                _alert(
                    "AlertmanagerReplicaDown",
                    f"up{{{am}}} == 0",
                    "10m",
                    "warning",
                    "An Alertmanager replica does not answer: one left to deliver every notification.",
                ),
            ],
        }
    ]


def rule_files(max_unready_percent: int) -> dict[str, dict[str, str]]:
    """``{"control-plane": {file: text}, "nodes": {file: text}}``: what each kind of shard loads."""
    control = {
        "groups": [
            *apiserver_rules(),
            *component_rules(),
            *etcd_rules(),
            *node_state_rules(max_unready_percent),
            *prometheus_rules(),
            *alertmanager_rules(),
        ]
    }
    nodes = {"groups": [*node_rules(), *prometheus_rules()]}
    return {"control-plane": {CONTROL_PLANE_FILE: dump(control)}, "nodes": {NODES_FILE: dump(nodes)}}


def dump(document: Any) -> str:
    return yaml_text.dump(document, sort_keys=False, default_flow_style=False, width=120)
