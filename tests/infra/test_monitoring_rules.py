"""Every alert fires when it should and stays silent when it should not: ``promtool test rules``
(the real one, built from Prometheus's Go module at the release the cluster runs) on the rule files
the program renders, with synthetic series written here, one firing and one silent case per alert."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from infra.addons.monitoring import rules
from infra.etcd.backup_metrics import LAST_SUCCESS_METRIC
from infra.facts.bootstrap_token import MINTED_METRIC
from infra.facts.labels import GPU_STARTUP_TAINT_KEY
from tests.helpers import PROJECT_DIR, load_yaml, monitoring_tool
from tests.infra.addon_fixtures import rule_files_of, spec_for

# The second stage of scripts/test.sh (tens of seconds): promtool and amtool on every rule and route.
pytestmark = pytest.mark.slow

API = 'job="apiserver"'
ETCD = 'job="etcd-main",instance="10.0.0.4:2381"'
ETCD_LABELS = {"job": "etcd-main", "instance": "10.0.0.4:2381"}


def _run(argv: list[str], timeout: float, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, check=False, capture_output=True, text=True, timeout=timeout)


@dataclass(frozen=True)
class Case:
    """Series that make ``alert`` fire at ``at`` with ``labels`` (besides the rule's own), and
    series that leave it silent at the same time."""

    alert: str
    fire: dict[str, str]
    silent: dict[str, str]
    at: str
    labels: list[dict[str, str]] = field(default_factory=lambda: [{}])


def _requests(code_rates: dict[str, int], samples: int = 30) -> dict[str, str]:
    return {
        f'apiserver_request_total{{{API},code="{code}"}}': f"0+{rate}x{samples}" for code, rate in code_rates.items()
    }


def _histogram(name: str, labels: str, counts: dict[str, int]) -> dict[str, str]:
    return {f'{name}_bucket{{{labels},le="{le}"}}': f"0+{n}x30" for le, n in counts.items()}


def _db(size: str, quota: str) -> dict[str, str]:
    return {f"etcd_mvcc_db_total_size_in_bytes{{{ETCD}}}": size, f"etcd_server_quota_backend_bytes{{{ETCD}}}": quota}


def _nodes_ready(ready: int, unready: int) -> dict[str, str]:
    base = 'kube_node_status_condition{job="kube-state-metrics",condition="Ready",status="true",node="n%d"}'
    return {base % i: ("1x30" if i < ready else "0x30") for i in range(ready + unready)}


def _dns(job: str, servfail: int) -> dict[str, str]:
    return {
        f'coredns_dns_responses_total{{job="{job}",node="n1",rcode="SERVFAIL"}}': f"0+{servfail}x30",
        f'coredns_dns_responses_total{{job="{job}",node="n1",rcode="NOERROR"}}': "0+100x30",
    }


def _azure_dns(job: str, per_minute: int) -> dict[str, str]:
    return {
        f'coredns_proxy_request_duration_seconds_count{{job="{job}",node="n1",proxy_name="forward",'
        f'to="{rules.AZURE_DNS}:53",rcode="NOERROR"}}': f"0+{per_minute}x30"
    }


NAT = 'job="node-exporter",role="nat-host",node="nat-0",instance="10.0.0.9:9100"'
NAT_LABELS = {"job": "node-exporter", "role": "nat-host", "node": "nat-0", "instance": "10.0.0.9:9100"}
CERT_BUCKETS = "apiserver_client_certificate_expiration_seconds"

PROM_INSTANCE = "prometheus-nodes-0-0.prometheus-nodes-0.monitoring.svc:9090"
PROM = f'job="prometheus",instance="{PROM_INSTANCE}"'
PROM_LABELS = {"job": "prometheus", "instance": PROM_INSTANCE}
AM_URL = "http://alertmanager-0.alertmanager.monitoring.svc:9093/api/v2/alerts"
# Every shard watches its own replicas and the other shards' liveness: these run on both kinds.
PROMETHEUS = [
    Case(
        "PrometheusRuleEvaluationFailures",
        {f'prometheus_rule_evaluation_failures_total{{{PROM},rule_group="etcd"}}': "0+1x40"},
        {f'prometheus_rule_evaluation_failures_total{{{PROM},rule_group="etcd"}}': "3x40"},
        "25m",
        [{**PROM_LABELS, "rule_group": "etcd"}],
    ),
    Case(
        "PrometheusNotConnectedToAlertmanagers",
        {f"prometheus_notifications_alertmanagers_discovered{{{PROM}}}": "0x30"},
        {f"prometheus_notifications_alertmanagers_discovered{{{PROM}}}": "2x30"},
        "20m",
        [PROM_LABELS],
    ),
    # Half the alerts sent to one Alertmanager fail (fires); none fail (silent).
    Case(
        "PrometheusErrorSendingAlerts",
        {
            f'prometheus_notifications_errors_total{{{PROM},alertmanager="{AM_URL}"}}': "0+5x40",
            f'prometheus_notifications_sent_total{{{PROM},alertmanager="{AM_URL}"}}': "0+10x40",
        },
        {
            f'prometheus_notifications_errors_total{{{PROM},alertmanager="{AM_URL}"}}': "0x40",
            f'prometheus_notifications_sent_total{{{PROM},alertmanager="{AM_URL}"}}': "0+10x40",
        },
        "25m",
        [{"instance": PROM_INSTANCE, "alertmanager": AM_URL}],
    ),
    Case(
        "PrometheusNotificationsDropped",
        {f"prometheus_notifications_dropped_total{{{PROM}}}": "0+1x30"},
        {f"prometheus_notifications_dropped_total{{{PROM}}}": "7x30"},
        "20m",
        [PROM_LABELS],
    ),
    # Both replicas of nodes-3 down fires, once, for the shard; one of the two answering is enough.
    Case(
        "PrometheusShardDown",
        {f'up{{job="{rules.JOB_PROMETHEUS_PEERS}",shard="nodes-3",instance="p-{i}:9090"}}': "0x20" for i in (0, 1)},
        {
            f'up{{job="{rules.JOB_PROMETHEUS_PEERS}",shard="nodes-3",instance="p-0:9090"}}': "0x20",
            f'up{{job="{rules.JOB_PROMETHEUS_PEERS}",shard="nodes-3",instance="p-1:9090"}}': "1x20",
        },
        "10m",
        [{"shard": "nodes-3"}],
    ),
]
AM = 'job="alertmanager",instance="alertmanager-1.alertmanager.monitoring.svc:9093"'
AM_LABELS = {"job": "alertmanager", "instance": "alertmanager-1.alertmanager.monitoring.svc:9093"}

CONTROL_PLANE = [
    Case("APIServerThrottling", _requests({"429": 10, "200": 100}), _requests({"429": 0, "200": 100}), "20m"),
    Case("APIServerErrors", _requests({"500": 3, "200": 100}), _requests({"500": 0, "200": 100}), "20m"),
    Case("APIServerErrorsHigh", _requests({"500": 10, "200": 100}), _requests({"500": 3, "200": 100}), "20m"),
    # 50% errors: at 10 minutes only the fastest burn (1h/5m, for 2m) has fired; the others are pending.
    Case(
        "APIServerErrorBudgetBurn",
        _requests({"500": 50, "200": 50}),
        _requests({"500": 0, "200": 50}),
        "10m",
        [{"long": "1h", "short": "5m"}],
    ),
    Case(
        "APIServerLatencyHigh",
        _histogram("apiserver_request_duration_seconds", f'{API},verb="GET"', {"0.5": 0, "1": 0, "5": 10, "+Inf": 10}),
        _histogram(
            "apiserver_request_duration_seconds", f'{API},verb="GET"', {"0.5": 10, "1": 10, "5": 10, "+Inf": 10}
        ),
        "20m",
        [{"verb": "GET"}],
    ),
    Case(
        "EtcdNoLeader",
        {f"etcd_server_has_leader{{{ETCD}}}": "0x10"},
        {f"etcd_server_has_leader{{{ETCD}}}": "1x10"},
        "5m",
        [ETCD_LABELS],
    ),
    # Leader-elected on every apiserver VM: one instance answering is enough; none answering pages.
    *(
        Case(
            alert,
            {f'up{{job="{job}",instance="10.0.0.{i}:{port}"}}': "0x10" for i in (5, 6)},
            {
                f'up{{job="{job}",instance="10.0.0.5:{port}"}}': "0x10",
                f'up{{job="{job}",instance="10.0.0.6:{port}"}}': "1x10",
            },
            "8m",
        )
        for alert, job, port in (
            ("KubeSchedulerDown", rules.JOB_SCHEDULER, 10259),
            ("KubeControllerManagerDown", rules.JOB_CONTROLLER_MANAGER, 10257),
        )
    ),
    # One standby down: fires for that instance alone; all answering is silent.
    Case(
        "ControlPlaneComponentInstanceDown",
        {
            f'up{{job="{rules.JOB_SCHEDULER}",instance="10.0.0.5:10259"}}': "0x20",
            f'up{{job="{rules.JOB_SCHEDULER}",instance="10.0.0.6:10259"}}': "1x20",
        },
        {f'up{{job="{rules.JOB_CONTROLLER_MANAGER}",instance="10.0.0.{i}:10257"}}': "1x20" for i in (5, 6)},
        "16m",
        [{"job": rules.JOB_SCHEDULER, "instance": "10.0.0.5:10259"}],
    ),
    Case("EtcdMemberDown", {f"up{{{ETCD}}}": "0x10"}, {f"up{{{ETCD}}}": "1x10"}, "5m", [ETCD_LABELS]),
    Case(
        "EtcdHighNumberOfLeaderChanges",
        {f"etcd_server_leader_changes_seen_total{{{ETCD}}}": "0+1x30"},
        {f"etcd_server_leader_changes_seen_total{{{ETCD}}}": "2x30"},
        "25m",
        [{"job": "etcd-main"}],
    ),
    Case(
        "EtcdHighCommitDurations",
        _histogram("etcd_disk_backend_commit_duration_seconds", ETCD, {"0.128": 0, "0.512": 10, "+Inf": 10}),
        _histogram("etcd_disk_backend_commit_duration_seconds", ETCD, {"0.128": 10, "0.512": 10, "+Inf": 10}),
        "20m",
        [ETCD_LABELS],
    ),
    Case(
        "EtcdHighFsyncDurations",
        _histogram("etcd_disk_wal_fsync_duration_seconds", ETCD, {"0.256": 0, "1.024": 10, "+Inf": 10}),
        _histogram("etcd_disk_wal_fsync_duration_seconds", ETCD, {"0.256": 10, "1.024": 10, "+Inf": 10}),
        "20m",
        [ETCD_LABELS],
    ),
    Case("EtcdDatabaseQuotaLowSpace", _db("97x30", "100x30"), _db("90x30", "100x30"), "20m", [ETCD_LABELS]),
    Case("EtcdDatabaseQuotaFilling", _db("85x30", "100x30"), _db("50x30", "100x30"), "20m", [ETCD_LABELS]),
    Case("EtcdExcessiveDatabaseGrowth", _db("0+1x90", "200x90"), _db("10x90", "200x90"), "60m", [ETCD_LABELS]),
    # The newest snapshot stays at time 0 (fire) or keeps up with the clock (silent).
    Case(
        "EtcdBackupStale",
        {f'{LAST_SUCCESS_METRIC}{{job="etcd-backup",etcd_cluster="main"}}': "0x200"},
        {f'{LAST_SUCCESS_METRIC}{{job="etcd-backup",etcd_cluster="main"}}': "0+60x200"},
        "120m",
        [{"etcd_cluster": "main"}],
    ),
    Case(
        "EtcdBackupMetricsMissing",
        {
            'up{job="etcd-backup",instance="10.0.0.4:9479"}': "0x30",
            f'{LAST_SUCCESS_METRIC}{{job="etcd-backup",etcd_cluster="main",instance="10.0.0.5:9479"}}': "0+60x30",
        },
        {
            'up{job="etcd-backup",instance="10.0.0.4:9479"}': "1x30",
            f'{LAST_SUCCESS_METRIC}{{job="etcd-backup",etcd_cluster="main",instance="10.0.0.4:9479"}}': "0+60x30",
        },
        "20m",
        [{"job": "etcd-backup", "instance": "10.0.0.4:9479"}],
    ),
    # The mint time stays where it was: at 14 h, a token minted at 0 is overdue (13 h), one minted at 3 h is not;
    # at 21 h, one minted at 0 expires within four hours (20 h), one minted at 2 h does not.
    Case(
        "BootstrapTokenMintOverdue",
        {f'{MINTED_METRIC}{{job="{rules.JOB_TOKEN_MINTER}"}}': "0x900"},
        {f'{MINTED_METRIC}{{job="{rules.JOB_TOKEN_MINTER}"}}': "10800x900"},
        "14h",
    ),
    Case(
        "BootstrapTokenExpiring",
        {f'{MINTED_METRIC}{{job="{rules.JOB_TOKEN_MINTER}"}}': "0x1300"},
        {f'{MINTED_METRIC}{{job="{rules.JOB_TOKEN_MINTER}"}}': "7200x1300"},
        "21h",
    ),
    Case(
        "BootstrapTokenMinterMetricsMissing",
        {
            f'up{{job="{rules.JOB_TOKEN_MINTER}",instance="10.0.0.4:9480"}}': "0x30",
            f'{MINTED_METRIC}{{job="{rules.JOB_TOKEN_MINTER}",instance="10.0.0.5:9480"}}': "0x30",
        },
        {
            f'up{{job="{rules.JOB_TOKEN_MINTER}",instance="10.0.0.4:9480"}}': "1x30",
            f'{MINTED_METRIC}{{job="{rules.JOB_TOKEN_MINTER}",instance="10.0.0.4:9480"}}': "0x30",
        },
        "20m",
        [{"job": rules.JOB_TOKEN_MINTER, "instance": "10.0.0.4:9480"}],
    ),
    Case(
        "NodeNotReady",
        _nodes_ready(1, 1),
        _nodes_ready(2, 0),
        "20m",
        [{"job": "kube-state-metrics", "condition": "Ready", "status": "true", "node": "n1"}],
    ),
    # The autoscaler's guard in prod is 33%: half of it (16%) pages; 2 of 4 unready is 50%, 1 of 10 is 10%.
    Case("NodesNotReadyMany", _nodes_ready(2, 2), _nodes_ready(9, 1), "20m"),
    Case(
        "ClusterAutoscalerHalted",
        {'cluster_autoscaler_cluster_safe_to_autoscale{job="cluster-autoscaler",pod="ca-0"}': "0x30"},
        {'cluster_autoscaler_cluster_safe_to_autoscale{job="cluster-autoscaler",pod="ca-0"}': "1x30"},
        "20m",
        [{"job": "cluster-autoscaler", "pod": "ca-0"}],
    ),
    Case(
        "ClusterAutoscalerDown",
        {'up{job="cluster-autoscaler",pod="ca-0"}': "0x30"},
        {'up{job="cluster-autoscaler",pod="ca-0"}': "1x30"},
        "20m",
        [{"job": "cluster-autoscaler", "pod": "ca-0"}],
    ),
    Case(
        "GPUStartupTaintNotLifted",
        {
            f'kube_node_spec_taint{{job="kube-state-metrics",node="g1",key="{GPU_STARTUP_TAINT_KEY}",'
            'effect="NoSchedule"}': "1x60"
        },
        {'kube_node_spec_taint{job="kube-state-metrics",node="g1",key="other",effect="NoSchedule"}': "1x60"},
        "40m",
        [{"job": "kube-state-metrics", "node": "g1", "key": GPU_STARTUP_TAINT_KEY, "effect": "NoSchedule"}],
    ),
    Case("CoreDNSErrors", _dns("coredns", 10), _dns("coredns", 0), "20m", [{"job": "coredns", "node": "n1"}]),
    # 200 queries/s (12,000 a minute) to Azure DNS from one node fires; 50/s does not.
    Case(
        "CoreDNSUpstreamRateNearAzureLimit",
        _azure_dns("coredns", 12_000),
        _azure_dns("coredns", 3_000),
        "20m",
        [{"job": "coredns", "node": "n1"}],
    ),
    Case(
        "APIServerClientCertificateExpiring",
        {
            f"{CERT_BUCKETS}_count{{{API}}}": "0+10x30",
            **_histogram(CERT_BUCKETS, API, {"3600": 0, "86400": 10, "604800": 10, "2592000": 10, "+Inf": 10}),
        },
        {
            f"{CERT_BUCKETS}_count{{{API}}}": "0+10x30",
            **_histogram(CERT_BUCKETS, API, {"3600": 0, "86400": 0, "604800": 0, "2592000": 10, "+Inf": 10}),
        },
        "20m",
        [{"job": "apiserver"}],
    ),
    *PROMETHEUS,
    # Every PagerDuty notification fails (the receivers' Secret missing: reason "other"); the
    # webhook's succeed. Silent: PagerDuty's succeed too.
    Case(
        "AlertmanagerFailedToSendNotifications",
        {
            f'alertmanager_notifications_failed_total{{{AM},integration="pagerduty",reason="other"}}': "0+2x30",
            f'alertmanager_notifications_total{{{AM},integration="pagerduty"}}': "0+2x30",
            f'alertmanager_notifications_total{{{AM},integration="webhook"}}': "0+2x30",
        },
        {
            f'alertmanager_notifications_failed_total{{{AM},integration="pagerduty",reason="other"}}': "0x30",
            f'alertmanager_notifications_total{{{AM},integration="pagerduty"}}': "0+2x30",
            f'alertmanager_notifications_total{{{AM},integration="webhook"}}': "0+2x30",
        },
        "20m",
        [{"integration": "pagerduty"}],
    ),
    Case("AlertmanagerReplicaDown", {f"up{{{AM}}}": "0x20"}, {f"up{{{AM}}}": "1x20"}, "15m", [AM_LABELS]),
]

KUBELET = 'job="kubelet",node="n1"'
NODES = [
    Case(
        "NodeLocalDNSErrors",
        _dns("node-local-dns", 10),
        _dns("node-local-dns", 0),
        "20m",
        [{"job": "node-local-dns", "node": "n1"}],
    ),
    Case(
        "NodeUpstreamDNSRateNearAzureLimit",
        _azure_dns("node-local-dns", 12_000),
        _azure_dns("node-local-dns", 3_000),
        "20m",
        [{"job": "node-local-dns", "node": "n1"}],
    ),
    Case(
        "GPUXidError",
        {'DCGM_FI_DEV_XID_ERRORS{job="dcgm-exporter",node="g1",gpu="3"}': "0x5 79x5 0x20"},
        {'DCGM_FI_DEV_XID_ERRORS{job="dcgm-exporter",node="g1",gpu="3"}': "0x30"},
        "12m",
        [{"job": "dcgm-exporter", "node": "g1", "gpu": "3"}],
    ),
    Case(
        "KubeletClientCertificateExpiring",
        {f"kubelet_certificate_manager_client_ttl_seconds{{{KUBELET}}}": "500000x30"},
        {f"kubelet_certificate_manager_client_ttl_seconds{{{KUBELET}}}": "2000000x30"},
        "10m",
        [{"job": "kubelet", "node": "n1"}],
    ),
    Case(
        "KubeletClientCertificateExpiringSoon",
        {f"kubelet_certificate_manager_client_ttl_seconds{{{KUBELET}}}": "50000x30"},
        {f"kubelet_certificate_manager_client_ttl_seconds{{{KUBELET}}}": "500000x30"},
        "10m",
        [{"job": "kubelet", "node": "n1"}],
    ),
    Case(
        "KubeletCertificateRenewErrors",
        {f"kubelet_certificate_manager_client_expiration_renew_errors{{{KUBELET}}}": "0+1x40"},
        {f"kubelet_certificate_manager_client_expiration_renew_errors{{{KUBELET}}}": "3x40"},
        "30m",
        [{"job": "kubelet", "node": "n1"}],
    ),
    # A CPU node's node-exporter down is not a NAT host down.
    Case(
        "NATHostDown", {f"up{{{NAT}}}": "0x10"}, {f"up{{{NAT.replace('nat-host', 'cpu')}}}": "0x10"}, "5m", [NAT_LABELS]
    ),
    Case(
        "NATHostConntrackFull",
        {f"node_nf_conntrack_entries{{{NAT}}}": "900x30", f"node_nf_conntrack_entries_limit{{{NAT}}}": "1000x30"},
        {f"node_nf_conntrack_entries{{{NAT}}}": "500x30", f"node_nf_conntrack_entries_limit{{{NAT}}}": "1000x30"},
        "20m",
        [NAT_LABELS],
    ),
    *PROMETHEUS,
]


def _alert_rules(text: str) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for group in load_yaml(text)["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                found.setdefault(rule["alert"], []).append(rule)
    return found


def _test_file(rule_file: str, alert_rules: dict[str, list[dict]], cases: list[Case]) -> dict:
    tests = []
    for case in cases:
        variants = alert_rules[case.alert]

        def expected(labels: dict[str, str], variants: list[dict] = variants) -> dict:
            """The rule (of those sharing the name) whose own labels agree with ``labels``."""
            own = next(r for r in variants if all(r["labels"].get(k, v) == v for k, v in labels.items()))
            return {"exp_labels": {**labels, **own["labels"]}, "exp_annotations": own["annotations"]}

        for kind, series, alerts in (
            ("fires", case.fire, [expected(labels) for labels in case.labels]),
            ("stays silent", case.silent, []),
        ):
            tests.append(
                {
                    "name": f"{case.alert} {kind}",
                    "interval": "1m",
                    "input_series": [{"series": s, "values": v} for s, v in series.items()],
                    "alert_rule_test": [{"eval_time": case.at, "alertname": case.alert, "exp_alerts": alerts}],
                }
            )
    return {"rule_files": [rule_file], "evaluation_interval": "1m", "tests": tests}


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict[str, str]]:
    return rule_files_of(spec_for("prod"))


@pytest.mark.parametrize("kind,cases", [("control-plane", CONTROL_PLANE), ("nodes", NODES)])
def test_every_alert_has_a_case(rendered, kind, cases):
    (text,) = rendered[kind].values()
    assert sorted(_alert_rules(text)) == sorted(case.alert for case in cases)


@pytest.mark.parametrize("kind,cases", [("control-plane", CONTROL_PLANE), ("nodes", NODES)])
def test_every_alert_fires_when_it_should_and_stays_silent_otherwise(rendered, kind, cases, tmp_path: Path):
    promtool = monitoring_tool("promtool")
    ((name, text),) = rendered[kind].items()
    (tmp_path / name).write_text(text)
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(_test_file(name, _alert_rules(text), cases), sort_keys=False))
    result = _run([promtool, "test", "rules", "tests.yaml"], 300, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]


@pytest.mark.parametrize("kind,cases", [("control-plane", CONTROL_PLANE), ("nodes", NODES)])
def test_every_case_tells_firing_from_silent(rendered, kind, cases, tmp_path: Path):
    """The cases can fail: with each expectation inverted (the firing case expecting nothing, the
    silent one expecting an alert) promtool reports every one of them."""
    promtool = monitoring_tool("promtool")
    ((name, text),) = rendered[kind].items()
    (tmp_path / name).write_text(text)
    document = _test_file(name, _alert_rules(text), cases)
    for test in document["tests"]:
        for check in test["alert_rule_test"]:
            check["exp_alerts"] = [] if check["exp_alerts"] else [{"exp_labels": {"inverted": "true"}}]
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    result = _run([promtool, "test", "rules", "tests.yaml"], 300, cwd=tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    for test in document["tests"]:
        assert f"name: {test['name']}," in output, test["name"]


def test_rule_files_pass_promtool_check(rendered, tmp_path: Path):
    promtool = monitoring_tool("promtool")
    paths = []
    for files in rendered.values():
        for name, text in files.items():
            (tmp_path / name).write_text(text)
            paths.append(str(tmp_path / name))
    result = _run([promtool, "check", "rules", *paths], 120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_runbook_row_in_docs_that_its_annotation_points_to(rendered):
    doc = (PROJECT_DIR / "docs" / "monitoring.md").read_text()
    rows = {}
    for line in doc.splitlines():
        match = __import__("re").match(r'\| <a id="([a-z0-9]+)"></a>(\w+) \| [^|]+ \| [^|]+ \| (.+) \|$', line)
        if match:
            rows[match.group(2)] = (match.group(1), match.group(3))
    alerts = {
        name: found
        for files in rendered.values()
        for text in files.values()
        for name, found in _alert_rules(text).items()
    }
    assert sorted(rows) == sorted(alerts)
    for name, variants in alerts.items():
        anchor, runbook = rows[name]
        assert anchor == name.lower() and len(runbook) > 20
        for rule in variants:
            assert rule["annotations"]["runbook"] == f"docs/monitoring.md#{anchor}"
