"""Prometheus: the rules the 7,500-node post alerts on, checked by promtool, and what it scrapes."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from infra.addons import monitoring
from tests.helpers import require_tool
from tests.infra.addon_fixtures import find, groups_for, prometheus_config_of, spec_for


def _rules() -> dict[str, dict]:
    rules = {}
    for text in monitoring.rule_files().values():
        for group in yaml.safe_load(text)["groups"]:
            for rule in group["rules"]:
                rules.setdefault(rule.get("alert") or rule["record"], []).append(rule)
    return rules


def test_rule_files_pass_promtool(tmp_path):
    promtool = require_tool("promtool")
    for name, text in monitoring.rule_files().items():
        (tmp_path / name).write_text(text)
    result = subprocess.run([promtool, "check", "rules", *sorted(map(str, tmp_path.iterdir()))],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_scrape_config_passes_promtool(tmp_path):
    """Debian's promtool is built without Kubernetes discovery, so each kubernetes_sd_configs block is
    swapped for a static target and everything else (relabelling, auth, globals) is checked as is."""
    promtool = require_tool("promtool")
    document = yaml.safe_load(prometheus_config_of(spec_for("prod")))
    discovered = 0
    for job in document["scrape_configs"]:
        if job.pop("kubernetes_sd_configs", None) is not None:
            job["static_configs"] = [{"targets": ["127.0.0.1:9090"]}]
            discovered += 1
    assert discovered == 5
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(document))
    result = subprocess.run([promtool, "check", "config", "--syntax-only", str(tmp_path / "prometheus.yml")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_apiserver_429_and_5xx_rates_and_error_budget_burn_are_alerted_on():
    rules = _rules()
    assert 'code="429"' in rules["APIServerThrottling"][0]["expr"]
    assert 'code=~"5.."' in rules["APIServerErrors"][0]["expr"]
    burns = rules["APIServerErrorBudgetBurn"]
    assert {(b["labels"]["long"], b["labels"]["short"]) for b in burns} == {("1h", "5m"), ("6h", "30m"),
                                                                           ("1d", "2h"), ("3d", "6h")}
    assert "apiserver_request:error_ratio_rate1h > (14.4 * 0.01)" in burns[0]["expr"]
    assert 'code=~"5..|429"' in rules["apiserver_request:error_ratio_rate5m"][0]["expr"]


def test_etcd_commit_latency_quota_and_leader_changes_are_alerted_on():
    rules = _rules()
    assert "etcd_disk_backend_commit_duration_seconds_bucket" in rules["EtcdHighCommitDurations"][0]["expr"]
    quota = rules["EtcdDatabaseQuotaLowSpace"][0]["expr"]
    assert "etcd_mvcc_db_total_size_in_bytes" in quota and "etcd_server_quota_backend_bytes" in quota
    assert "> 95" in quota
    assert "etcd_server_leader_changes_seen_total" in rules["EtcdHighNumberOfLeaderChanges"][0]["expr"]
    assert rules["EtcdNoLeader"][0]["labels"]["severity"] == "critical"


def test_both_etcd_clusters_and_every_agent_are_scraped():
    spec = spec_for("prod")
    document = yaml.safe_load(prometheus_config_of(spec))
    jobs = {job["job_name"]: job for job in document["scrape_configs"]}
    assert set(jobs) == {"apiserver", "etcd-main", "etcd-events", "coredns", "cluster-autoscaler",
                         "node-local-dns", "iptables-exporter"}
    assert len(jobs["etcd-main"]["static_configs"][0]["targets"]) == 5
    assert jobs["etcd-events"]["static_configs"][0]["targets"][0] == \
        f"{spec.addresses.etcd_ips('events-etcd', 3)[0]}:2381"
    assert jobs["iptables-exporter"]["relabel_configs"][0]["replacement"] == "${1}:9119"


def test_prometheus_survives_scale_down_and_reloads_on_config_change():
    deployment = find(groups_for("prod"), "Deployment", "prometheus")
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false"
    other = find(groups_for("prod", addons={"monitoring": {"scrapeInterval": "15s"}}), "Deployment", "prometheus")
    assert other["spec"]["template"]["metadata"]["annotations"]["supercluster.io/config-sha256"] != \
        annotations["supercluster.io/config-sha256"]


@pytest.mark.parametrize("value", ["0s", "10m"])
def test_scrape_interval_bounds(value):
    from infra.errors import ConfigError

    with pytest.raises(ConfigError, match="addons.monitoring.scrapeInterval"):
        spec_for("dev", addons={"monitoring": {"scrapeInterval": value}})
