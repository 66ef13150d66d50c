"""Monitoring: each shard's configuration and the Alertmanager configuration checked by the real
promtool and amtool, the shard arithmetic, what each shard scrapes, and the objects that run it."""

from __future__ import annotations

import json
import math
import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from infra.addons import images, monitoring
from infra.addons.monitoring import alertmanager, credential, exporters, grafana, rules, shards
from infra.cluster.cluster_spec import build_cluster_spec
from infra.config import naming
from infra.config.errors import ConfigError
from infra.control_plane import controller_manager, machine_identity, paths, scheduler
from infra.etcd import backup_metrics
from infra.facts.labels import GPU_PRESENT_LABEL
from tests.helpers import PROJECT_DIR, bcrypt_hash, load_yaml, monitoring_tool, parsed, raw_stack
from tests.infra.addon_fixtures import (
    find,
    groups_for,
    prometheus_configs_of,
    rule_files_of,
    shard_names_of,
    spec_for,
)
from tests.infra.control_plane_files import component_flags, machines

RECEIVERS = [
    {"name": "oncall", "type": "pagerduty", "keyVaultSecret": "alerting-pagerduty-key", "severities": ["critical"]},
    {"name": "team-chat", "type": "msteams", "keyVaultSecret": "alerting-teams-url"},
    {"name": "hook", "type": "webhook", "keyVaultSecret": "alerting-webhook-url", "severities": ["warning"]},
    {
        "name": "mail",
        "type": "email",
        "keyVaultSecret": "alerting-smtp-password",
        "to": "oncall@example.com",
        "from": "cluster@example.com",
        "smarthost": "smtp.example.com:587",
    },
]


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=False, capture_output=True, text=True, timeout=timeout)


def _configs(stack: str = "prod", **settings) -> dict[str, dict]:
    spec = spec_for(stack, addons={"monitoring": settings} if settings else None)
    return {name: load_yaml(text) for name, text in prometheus_configs_of(spec).items()}


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_shard_config_passes_the_real_promtool_with_kubernetes_discovery(stack, tmp_path: Path):
    """promtool built from Prometheus's Go module knows kubernetes_sd_configs: the rendered files go in unchanged."""
    promtool = monitoring_tool("promtool")
    paths = []
    for name, text in prometheus_configs_of(spec_for(stack)).items():
        (tmp_path / f"{name}.yml").write_text(text)
        paths.append(str(tmp_path / f"{name}.yml"))
    result = _run([promtool, "check", "config", "--syntax-only", *paths], 120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(paths)


def test_promtool_refuses_a_broken_shard_config(tmp_path: Path):
    promtool = monitoring_tool("promtool")
    document = _configs()["nodes-0"]
    document["scrape_configs"][0]["relabel_configs"][0]["action"] = "hashmodulo"
    (tmp_path / "broken.yml").write_text(yaml.safe_dump(document))
    result = _run([promtool, "check", "config", "--syntax-only", str(tmp_path / "broken.yml")], 60)
    assert result.returncode != 0


def test_prod_is_split_into_shards_derived_from_max_nodes_and_the_series_bound():
    spec = spec_for("prod")
    per_node = sum(job.sample_limit for job in shards.node_jobs(9253, 9119))
    assert monitoring.series_per_node(spec.config) == per_node == 5_200
    budget = monitoring.Settings().series_per_shard
    assert spec.config.max_nodes_total == 7_500 and math.ceil(7_500 * per_node / budget) == 10  # needed
    # A first deploy sizes for a quarter more nodes than maxNodes: 9,375 x 5,200 / 4,000,000 -> 13.
    expected = math.ceil(math.ceil(7_500 * monitoring.SHARD_HEADROOM) * per_node / budget)
    assert expected == 13
    assert shard_names_of(spec) == ["control-plane", *(f"nodes-{i}" for i in range(expected))]
    assert shard_names_of(spec_for("dev")) == ["control-plane", "nodes-0"]


@pytest.mark.parametrize(
    ("max_nodes", "last", "expected"),
    [
        (7_500, None, 13),  # first deploy: sized for 9,375 nodes
        (8_500, 13, 13),  # grown by 1,000: the 13 still hold it (11.05 needed), nothing re-partitioned
        (5_000, 13, 13),  # shrunk: kept (fewer shards would re-partition every node too)
        (10_500, 13, 18),  # outgrown (13.65 needed): re-sized with headroom, 13,125 nodes -> 18
        (7_500, 9, 13),  # a count that no longer holds maxNodes is never kept
    ],
)
def test_node_shards_outlive_resizes_inside_what_the_last_count_holds(max_nodes, last, expected):
    config = spec_for("prod").config
    pools = [replace(p, max_nodes=0, min_nodes=0) for p in config.node_pools]
    pools[0] = replace(config.node_pools[0], max_nodes=max_nodes, min_nodes=0)
    config = replace(config, node_pools=tuple(pools))
    assert config.max_nodes_total == max_nodes
    assert monitoring.planned_node_shards(monitoring.Settings(), config, last) == expected


def test_an_explicit_node_shard_count_wins_over_the_last_deploy():
    spec = spec_for("prod", addons={"monitoring": {"nodeShards": 11}})
    assert monitoring.planned_node_shards(spec.addons.monitoring, spec.config, 13) == 11


def test_each_node_shard_keeps_its_own_hash_bucket_of_every_node_job():
    configs = _configs()
    node_shards = [name for name in configs if name != "control-plane"]
    node_job_names = {j.job for j in shards.node_jobs(9253, 9119)}
    for index, name in enumerate(node_shards):
        jobs = configs[name]["scrape_configs"]
        assert {job["job_name"] for job in jobs} == node_job_names | {rules.JOB_PROMETHEUS, rules.JOB_PROMETHEUS_PEERS}
        for job in (j for j in jobs if j["job_name"] in node_job_names):
            hashmod, keep = job["relabel_configs"][:2]
            assert hashmod == {
                "source_labels": ["__meta_kubernetes_node_name"],
                "modulus": len(node_shards),
                "target_label": "__tmp_shard",
                "action": "hashmod",
            }
            assert keep == {"source_labels": ["__tmp_shard"], "regex": str(index), "action": "keep"}
            assert job["sample_limit"] > 0


def test_the_node_shards_scrape_kubelet_cadvisor_dcgm_node_exporter_and_the_existing_agents():
    jobs = {job["job_name"]: job for job in _configs()["nodes-0"]["scrape_configs"]}
    assert jobs["kubelet"]["scheme"] == jobs["cadvisor"]["scheme"] == "https"
    assert jobs["cadvisor"]["metrics_path"] == "/metrics/cadvisor"
    assert jobs["kubelet"]["relabel_configs"][2]["replacement"] == "${1}:10250"
    assert jobs["node-exporter"]["relabel_configs"][2]["replacement"] == f"${{1}}:{shards.NODE_EXPORTER_PORT}"
    assert jobs["iptables-exporter"]["relabel_configs"][2]["replacement"] == "${1}:9119"
    assert jobs["node-local-dns"]["relabel_configs"][2]["replacement"] == "${1}:9253"
    gpu_label = GPU_PRESENT_LABEL.replace(".", "_").replace("/", "_")
    gpu_keep = {"source_labels": [f"__meta_kubernetes_node_label_{gpu_label}"], "regex": "true", "action": "keep"}
    assert gpu_keep in jobs["dcgm-exporter"]["relabel_configs"]


def test_the_control_plane_shard_scrapes_both_etcd_clusters_their_backup_age_and_the_cluster_readers():
    spec = spec_for("prod")
    jobs = {job["job_name"]: job for job in _configs()["control-plane"]["scrape_configs"]}
    assert set(jobs) == {
        "apiserver",
        "etcd-main",
        "etcd-events",
        "etcd-backup",
        "kube-scheduler",
        "kube-controller-manager",
        "token-minter",
        "coredns",
        "cluster-autoscaler",
        "kube-state-metrics",
        "alertmanager",
        "prometheus",
        "prometheus-peers",
    }
    assert len(jobs["etcd-main"]["static_configs"][0]["targets"]) == 5
    etcd_ips = spec.addresses.etcd_ips("etcd", 5) + spec.addresses.etcd_ips("events-etcd", 3)
    assert jobs["etcd-backup"]["static_configs"][0]["targets"] == [
        f"{ip}:{backup_metrics.METRICS_PORT}" for ip in etcd_ips
    ]
    assert jobs["etcd-events"]["static_configs"][0]["targets"][0] == f"{etcd_ips[5]}:2381"


@pytest.mark.parametrize(
    "job,unit",
    [
        (rules.JOB_SCHEDULER, paths.SCHEDULER_UNIT),
        (rules.JOB_CONTROLLER_MANAGER, paths.CONTROLLER_MANAGER_UNIT),
    ],
)
def test_the_control_plane_shard_scrapes_scheduler_and_controller_manager_where_each_apiserver_binds_them(job, unit):
    """One target per apiserver, wherever the scale set put it: each apiserver's address as it advertises it in
    the ``kubernetes`` Service's EndpointSlice, on the port its rendered unit serves on, over HTTPS with
    Prometheus's service-account token (they delegate authentication to the apiserver)."""
    port = {paths.SCHEDULER_UNIT: scheduler.SECURE_PORT, paths.CONTROLLER_MANAGER_UNIT: controller_manager.SECURE_PORT}
    (config,) = [j for j in _configs()["control-plane"]["scrape_configs"] if j["job_name"] == job]
    # Each binds the address its machine reads from IMDS at boot, which its apiserver also advertises.
    flags = [component_flags(m, unit)["bind-address"] for m in machines("prod")]
    apiserver_flags = [component_flags(m, paths.APISERVER_UNIT)["advertise-address"] for m in machines("prod")]
    assert set(flags) == set(apiserver_flags) == {machine_identity.ADDRESS}
    assert "static_configs" not in config
    assert config["kubernetes_sd_configs"] == [{"role": "endpointslice", "namespaces": {"names": ["default"]}}]
    keep, address = config["relabel_configs"]
    assert (keep["regex"], keep["action"]) == ("kubernetes;https", "keep")
    # The apiserver's endpoint 10.0.0.7:6443 becomes the component's 10.0.0.7:<port>, as Prometheus rewrites it.
    match = re.fullmatch(address["regex"], "10.0.0.7:6443")
    assert match and address["replacement"].replace("${1}", match.group(1)) == f"10.0.0.7:{port[unit]}"
    assert address["target_label"] == "__address__"
    assert config["scheme"] == "https"
    assert config["authorization"] == {"credentials_file": f"{shards.ACCOUNT_DIR}/token"}
    # Self-signed serving certificates, regenerated at each start: nothing stable to verify against.
    assert config["tls_config"] == {"insecure_skip_verify": True}
    for shard, document in _configs().items():
        if shard != "control-plane":
            assert job not in {j["job_name"] for j in document["scrape_configs"]}, shard


def _served(groups, name: str, port_name: str) -> list[str]:
    """The DNS names and port a StatefulSet's pods answer on under its headless Service."""
    workload = find(groups, "StatefulSet", name)
    service = find(groups, "Service", workload["spec"]["serviceName"])
    (port,) = [p["port"] for p in service["spec"]["ports"] if p["name"] == port_name]
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    assert port in [p["containerPort"] for p in container["ports"] if p["name"] == port_name]
    ns, svc = service["metadata"]["namespace"], service["metadata"]["name"]
    return [f"{name}-{i}.{svc}.{ns}.svc:{port}" for i in range(workload["spec"]["replicas"])]


def _static_targets(document: dict, job: str) -> dict[str, list[str]]:
    (config,) = [j for j in document["scrape_configs"] if j["job_name"] == job]
    return {g.get("labels", {}).get("shard", ""): g["targets"] for g in config["static_configs"]}


def test_the_monitoring_stack_scrapes_itself_at_the_names_its_statefulsets_serve():
    """Each shard its own replicas; the control-plane shard both Alertmanagers and every node
    shard's replicas; every node shard the control-plane shard's (a shard down is seen by another)."""
    groups, configs = groups_for("prod"), _configs()
    served = {shard: _served(groups, f"prometheus-{shard}", "web") for shard in configs}
    node_shards = [shard for shard in configs if shard != "control-plane"]
    for shard, document in configs.items():
        assert _static_targets(document, rules.JOB_PROMETHEUS) == {"": served[shard]}, shard
        watched = node_shards if shard == "control-plane" else ["control-plane"]
        assert _static_targets(document, rules.JOB_PROMETHEUS_PEERS) == {s: served[s] for s in watched}, shard
        (peers,) = [j for j in document["scrape_configs"] if j["job_name"] == rules.JOB_PROMETHEUS_PEERS]
        assert peers["metric_relabel_configs"] == [{"source_labels": ["__name__"], "regex": ".+", "action": "drop"}]
    assert _static_targets(configs["control-plane"], rules.JOB_ALERTMANAGER) == {
        "": _served(groups, "alertmanager", "web")
    }
    for shard in node_shards:
        assert rules.JOB_ALERTMANAGER not in {j["job_name"] for j in configs[shard]["scrape_configs"]}, shard


def test_every_shard_sends_alerts_to_both_alertmanagers_and_loads_its_rules():
    for name, document in _configs().items():
        targets = document["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
        assert targets == [f"alertmanager-{i}.alertmanager.monitoring.svc:9093" for i in range(2)]
        assert document["global"]["external_labels"]["shard"] == name
    groups = groups_for("prod")
    assert rules.CONTROL_PLANE_FILE in find(groups, "ConfigMap", "prometheus-control-plane-rules")["data"]
    assert rules.NODES_FILE in find(groups, "ConfigMap", "prometheus-nodes-3-rules")["data"]


def _alertmanager_config(tmp_path: Path, receivers=RECEIVERS) -> Path:
    spec = spec_for("prod", addons={"monitoring": {"receivers": receivers}})
    text = find(groups_for("prod", addons={"monitoring": {"receivers": receivers}}), "ConfigMap", "alertmanager")[
        "data"
    ]["alertmanager.yml"]
    assert text == alertmanager.config(spec.addons.monitoring.receivers, spec.config.cluster_name)
    (tmp_path / "alertmanager.yml").write_text(text)
    return tmp_path / "alertmanager.yml"


def test_the_alertmanager_config_passes_amtool_and_routes_each_severity_to_the_receivers_that_asked(tmp_path):
    amtool = monitoring_tool("amtool")
    path = _alertmanager_config(tmp_path)
    check = _run([amtool, "check-config", str(path)], 60)
    assert check.returncode == 0, check.stdout + check.stderr

    def routed(*labels: str) -> str:
        result = _run([amtool, "config", "routes", "test", f"--config.file={path}", *labels], 60)
        return result.stdout.strip()

    assert routed("alertname=EtcdNoLeader", "severity=critical") == "oncall,team-chat,mail"
    assert routed("alertname=NodeNotReady", "severity=warning") == "team-chat,hook,mail"
    assert routed("alertname=Other", "severity=info") == alertmanager.NULL_RECEIVER
    # A receiver that fails cannot carry the alert saying so: with receivers of several types the
    # others do (docs/monitoring.md "Receivers").
    (failing,) = [
        rule
        for group in rules.alertmanager_rules()
        for rule in group["rules"]
        if rule.get("alert") == "AlertmanagerFailedToSendNotifications"
    ]
    severity = failing["labels"]["severity"]
    assert routed("alertname=AlertmanagerFailedToSendNotifications", f"severity={severity}") == "oncall,team-chat,mail"


def test_prods_own_alertmanager_config_passes_amtool_and_pages_each_severity(tmp_path):
    """Prod's stack file (production: true) as rendered: critical alerts reach both receivers, warnings the one
    that asked for every severity, and nothing goes only to ``nobody``."""
    amtool = monitoring_tool("amtool")
    spec = build_cluster_spec(raw_stack("prod"), "eastus")
    path = tmp_path / "alertmanager.yml"
    path.write_text(alertmanager.config(spec.addons.monitoring.receivers, spec.config.cluster_name))
    check = _run([amtool, "check-config", str(path)], 60)
    assert check.returncode == 0, check.stdout + check.stderr

    def routed(*labels: str) -> str:
        return _run([amtool, "config", "routes", "test", f"--config.file={path}", *labels], 60).stdout.strip()

    assert routed("alertname=EtcdNoLeader", "severity=critical") == "oncall,team"
    assert routed("alertname=NodeNotReady", "severity=warning") == "team"


def test_amtool_refuses_an_alertmanager_config_it_cannot_load(tmp_path):
    amtool = monitoring_tool("amtool")
    path = _alertmanager_config(tmp_path)
    path.write_text(path.read_text().replace("routing_key_file", "routing_key_path"))
    assert _run([amtool, "check-config", str(path)], 60).returncode != 0


def test_receiver_secrets_are_files_named_after_key_vault_secrets_never_values():
    groups = groups_for("prod", addons={"monitoring": {"receivers": RECEIVERS}})
    document = load_yaml(find(groups, "ConfigMap", "alertmanager")["data"]["alertmanager.yml"])
    by_name = {r["name"]: r for r in document["receivers"]}
    assert by_name["oncall"]["pagerduty_configs"][0] == {
        "routing_key_file": f"{alertmanager.SECRETS_DIR}/alerting-pagerduty-key",
        "send_resolved": True,
    }
    assert by_name["mail"]["email_configs"][0]["auth_password_file"].endswith("/alerting-smtp-password")
    pod = find(groups, "StatefulSet", "alertmanager")["spec"]["template"]["spec"]
    (secret,) = [v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == alertmanager.RECEIVER_SECRET]
    assert secret["secret"] == {"secretName": alertmanager.RECEIVER_SECRET, "optional": True}
    assert not [o for objs in groups.values() for o in objs if o["kind"] == "Secret"]


@pytest.mark.parametrize(
    "receivers,key",
    [
        ([{"name": "x", "type": "sms", "keyVaultSecret": "a"}], "addons.monitoring.receivers[0].type"),
        (
            [{"name": "x", "type": "webhook", "keyVaultSecret": "not/valid"}],
            "addons.monitoring.receivers[0].keyVaultSecret",
        ),
        ([{"name": "x", "type": "email", "keyVaultSecret": "a"}], "addons.monitoring.receivers[0].to"),
        (
            [{"name": "x", "type": "webhook", "keyVaultSecret": "a", "severities": ["info"]}],
            "addons.monitoring.receivers[0].severities",
        ),
        ([{"name": "x", "type": "webhook", "keyVaultSecret": "a"}] * 2, "addons.monitoring.receivers"),
    ],
)
def test_bad_receivers_are_refused_naming_the_key(receivers, key):
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")):
        spec_for("dev", addons={"monitoring": {"receivers": receivers}})


def test_a_production_cluster_must_page_someone():
    """``production: true`` (prod's stack file) refuses a monitoring stack that pages nobody, in one line
    naming the key; the same config without it plans, as dev does."""
    with pytest.raises(ConfigError, match=r"addons.monitoring.receivers = \[\]: expected at least one receiver"):
        spec_for("prod", production=True)
    with pytest.raises(ConfigError, match=r"addons.monitoring.enabled = False: expected true while production"):
        spec_for("prod", addons={"monitoring": {"enabled": False, "receivers": RECEIVERS}}, production=True)
    assert spec_for("prod", addons={"monitoring": {"receivers": RECEIVERS}}, production=True).config.production
    assert not spec_for("prod").addons.monitoring.receivers


def test_prods_stack_file_is_production_and_pages_two_receivers_of_different_types():
    raw = raw_stack("prod")
    assert raw["production"] is True
    receivers = raw["addons"]["monitoring"]["receivers"]
    assert len({r["type"] for r in receivers}) >= 2  # the failure of one is heard through the other
    assert any("critical" in r.get("severities", alertmanager.SEVERITIES) for r in receivers)


def test_too_few_node_shards_are_refused():
    with pytest.raises(ConfigError, match="addons.monitoring.nodeShards.*at least 10"):
        spec_for("prod", addons={"monitoring": {"nodeShards": 4}})
    assert len(shard_names_of(spec_for("prod", addons={"monitoring": {"nodeShards": 12}}))) == 13


def test_each_shard_is_a_pair_on_two_nodes_with_its_data_on_the_node_disk_and_kept_by_the_autoscaler():
    groups = groups_for("prod")
    workload = find(groups, "StatefulSet", "prometheus-nodes-0")
    assert workload["spec"]["replicas"] == 2
    pod = workload["spec"]["template"]
    assert pod["metadata"]["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false"
    (data,) = [v for v in pod["spec"]["volumes"] if v["name"] == "data"]
    assert data["hostPath"] == {"path": f"{monitoring.HOST_DATA_DIR}/nodes-0", "type": "DirectoryOrCreate"}
    (term,) = pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == workload["spec"]["selector"]["matchLabels"]
    assert not [
        o
        for objs in groups.values()
        for o in objs
        if o["kind"] == "Deployment" and o["metadata"]["name"] == "prometheus"
    ]


def test_a_config_change_rolls_the_shard():
    before = find(groups_for("prod"), "StatefulSet", "prometheus-control-plane")
    after = find(
        groups_for("prod", addons={"monitoring": {"scrapeInterval": "15s"}}), "StatefulSet", "prometheus-control-plane"
    )
    key = "supercluster.io/config-sha256"
    assert (
        before["spec"]["template"]["metadata"]["annotations"][key]
        != after["spec"]["template"]["metadata"]["annotations"][key]
    )


def test_exporters_run_where_their_targets_are():
    groups = groups_for("prod")
    node_exporter = find(groups, "DaemonSet", exporters.NODE_EXPORTER)["spec"]["template"]["spec"]
    assert node_exporter["tolerations"] == [{"operator": "Exists"}] and node_exporter["hostNetwork"]
    dcgm = find(groups, "DaemonSet", exporters.DCGM_EXPORTER)["spec"]["template"]["spec"]
    assert dcgm["nodeSelector"] == {GPU_PRESENT_LABEL: "true"}
    registry = naming.container_registry_login_server(parsed("prod").cluster_name)
    assert dcgm["containers"][0]["image"] == images.in_cluster_registry(images.DCGM_EXPORTER, registry)
    ksm = find(groups, "Deployment", exporters.KUBE_STATE_METRICS)["spec"]["template"]["spec"]
    assert "--resources=nodes,pods,deployments,daemonsets,statefulsets,namespaces" in ksm["containers"][0]["args"]


def test_prometheus_may_read_kubelet_metrics_and_component_metrics():
    role = find(groups_for("prod"), "ClusterRole", "supercluster-prometheus")
    assert {"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]} in role["rules"]
    assert {"nonResourceURLs": ["/metrics"], "verbs": ["get"]} in role["rules"]


@pytest.mark.parametrize("value", ["0s", "10m"])
def test_scrape_interval_bounds(value):
    with pytest.raises(ConfigError, match="addons.monitoring.scrapeInterval"):
        spec_for("dev", addons={"monitoring": {"scrapeInterval": value}})


def test_dashboards_load_in_grafanas_dashboard_model_and_their_queries_parse(tmp_path: Path):
    """dashboard-check decodes each board strictly with the Grafana Foundation SDK's dashboard model
    (an unknown field, a wrong type or a missing required field fails); every panel query is then
    parsed by promtool as a recording rule."""
    check, promtool = monitoring_tool("dashboard-check"), monitoring_tool("promtool")
    boards = find(groups_for("prod"), "ConfigMap", "grafana-dashboards")["data"]
    assert sorted(boards) == ["control-plane.json", "gpus.json", "nodes.json", "traffic.json"]
    for name, text in boards.items():
        (tmp_path / name).write_text(text)
    result = _run([check, *sorted(str(p) for p in tmp_path.glob("*.json"))], 60)
    assert result.returncode == 0 and result.stdout.count("OK ") == 4, result.stdout
    queries = [t["expr"] for text in boards.values() for p in json.loads(text)["panels"] for t in p["targets"]]
    rules_file = tmp_path / "queries.yaml"
    rules_file.write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {
                        "name": "dashboards",
                        "rules": [{"record": f"dashboard:query{i}", "expr": q} for i, q in enumerate(queries)],
                    }
                ]
            }
        )
    )
    parsed = _run([promtool, "check", "rules", str(rules_file)], 60)
    assert parsed.returncode == 0, parsed.stdout + parsed.stderr


def test_dashboard_check_refuses_what_grafana_would_not_load(tmp_path: Path):
    check = monitoring_tool("dashboard-check")
    board = json.loads(find(groups_for("prod"), "ConfigMap", "grafana-dashboards")["data"]["gpus.json"])
    board["panels"][0]["gridPos"]["h"] = "eight"
    del board["templating"]
    (tmp_path / "broken.json").write_text(json.dumps(board))
    result = _run([check, str(tmp_path / "broken.json")], 60)
    assert result.returncode != 0 and "gridPos.h" in result.stdout and "templating" in result.stdout


def test_grafana_has_one_data_source_per_shard_matching_the_dashboards_selectors():
    groups = groups_for("prod")
    sources = load_yaml(find(groups, "ConfigMap", "grafana-datasources")["data"]["prometheus.yaml"])
    names = [s["name"] for s in sources["datasources"]]
    assert names == [f"prometheus-{shard}" for shard in shard_names_of(spec_for("prod"))]
    assert sources["datasources"][1]["url"] == "http://prometheus-nodes-0.monitoring.svc:9090"
    boards = find(groups, "ConfigMap", "grafana-dashboards")["data"]
    for file, text in boards.items():
        (variable,) = json.loads(text)["templating"]["list"]
        pattern = re.compile(variable["regex"].strip("/"))
        selected = [n for n in names if pattern.fullmatch(n)]
        assert selected == (names[:1] if file == "control-plane.json" else names[1:]), file


def test_the_docs_show_the_same_series_arithmetic_the_code_uses():
    doc = (PROJECT_DIR / "docs" / "monitoring.md").read_text()
    spec = spec_for("prod")
    jobs = shards.node_jobs(9253, 9119)
    for job in jobs:
        assert f"| {job.job} | {job.port} | {job.sample_limit:,} |" in doc, job.job
    per_node = monitoring.series_per_node(spec.config)
    total = spec.config.max_nodes_total * per_node
    budget = monitoring.Settings().series_per_shard
    count = len(shard_names_of(spec)) - 1
    sized_for = math.ceil(spec.config.max_nodes_total * monitoring.SHARD_HEADROOM)
    assert f"| **per node** | | **{per_node:,}** |" in doc
    assert f"{spec.config.max_nodes_total:,} × {per_node:,} = **{total:,}**" in doc
    assert f"⌈{total:,} / {budget:,}⌉ = **{math.ceil(total / budget)}**" in doc
    assert f"N = ⌈{sized_for:,} × {per_node:,} / {budget:,}⌉ = **{count}** node shards" in doc


def test_the_tsdb_size_cap_must_fit_half_the_smallest_cpu_nodes_local_disk():
    with pytest.raises(ConfigError, match=r"addons.monitoring.storageGiB = 400: expected at most 300 .*D16ds_v5"):
        spec_for("dev", addons={"monitoring": {"storageGiB": 400}})
    assert spec_for("dev", addons={"monitoring": {"storageGiB": 300}}).addons.monitoring.storage_gib == 300


def test_every_job_a_rule_reads_is_scraped_by_the_shard_that_evaluates_it():
    """Rules run where their data is: a rule naming a job its shard does not scrape never fires."""
    spec = spec_for("prod")
    configs = _configs()
    for kind, files in rule_files_of(spec).items():
        shard = "control-plane" if kind == "control-plane" else "nodes-0"
        scraped = {job["job_name"] for job in configs[shard]["scrape_configs"]}
        (text,) = files.values()
        named = set(re.findall(r'job(?:=~?)"([^"]+)"', text))
        jobs = {job for pattern in named for job in pattern.split("|")}
        assert jobs and jobs <= scraped, (kind, sorted(jobs - scraped))


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_kubelet_scrape_verifies_the_kubelet_with_the_cluster_ca(stack):
    """Kubelets serve certificates from the cluster CA (serverTLSBootstrap, approved for the Node's own
    addresses): the scrape checks them against the CA the service-account volume carries. Skipping the check
    (the old self-signed design) fails here."""
    jobs = [
        job
        for document in _configs(stack).values()
        for job in document["scrape_configs"]
        if job["job_name"] in (rules.JOB_KUBELET, rules.JOB_CADVISOR)
    ]
    assert jobs
    for job in jobs:
        assert job["scheme"] == "https" and job["tls_config"] == {"ca_file": shards.ACCOUNT_CA}, job["job_name"]
    assert f"{shards.ACCOUNT_DIR}/ca.crt" == shards.ACCOUNT_CA


def _stack_clients(groups) -> list[tuple[str, dict]]:
    """Every client configuration the program renders that calls the monitoring stack: each shard's alerting,
    every scrape job whose targets are the stack's own Services or pods it discovers in the stack's namespace
    (kube-state-metrics), and Grafana's data sources."""
    stack_host = re.compile(rf"\.{monitoring.NAMESPACE}\.svc:({monitoring.PORT}|{alertmanager.PORT})$")
    found = []
    for shard, document in _configs().items():
        for index, sender in enumerate(document["alerting"]["alertmanagers"]):
            found.append((f"{shard} alerting[{index}]", sender))
        for job in document["scrape_configs"]:
            targets = [t for group in job.get("static_configs", []) for t in group["targets"]]
            in_stack = [sd.get("namespaces", {}).get("names") for sd in job.get("kubernetes_sd_configs", [])]
            if any(stack_host.search(t) for t in targets) or [monitoring.NAMESPACE] in in_stack:
                found.append((f"{shard} {job['job_name']}", job))
    return found


def test_every_client_of_the_monitoring_stack_presents_the_stacks_credential():
    """Today's design failed here: no client carried a credential (the APIs asked for none); and then again on the
    scrape of kube-state-metrics, which asked for none either."""
    groups = groups_for("prod")
    clients = _stack_clients(groups)
    assert {name.split(" ", 1)[1] for name, _ in clients} >= {
        "alerting[0]",
        rules.JOB_PROMETHEUS,
        rules.JOB_PROMETHEUS_PEERS,
        rules.JOB_ALERTMANAGER,
        rules.JOB_KUBE_STATE_METRICS,
    }
    expected = {"username": credential.USER, "password_file": f"{credential.MOUNT_DIR}/{credential.PASSWORD}"}
    for name, client in clients:
        assert client.get("basic_auth") == expected, name
    sources = load_yaml(find(groups, "ConfigMap", "grafana-datasources")["data"]["prometheus.yaml"])["datasources"]
    for source in sources:
        assert (source["basicAuth"], source["basicAuthUser"]) == (True, credential.USER), source["name"]
        assert source["secureJsonData"] == {
            "basicAuthPassword": f"$__file{{{credential.MOUNT_DIR}/{credential.PASSWORD}}}"
        }


def test_prometheus_alertmanager_and_grafana_serve_only_with_the_secret_mounted_and_no_anonymous_grafana():
    groups = groups_for("prod")
    web_config = f"--web.config.file={credential.MOUNT_DIR}/{credential.WEB_CONFIG}"
    workloads = [
        find(groups, "StatefulSet", monitoring.shard_workload(shard)) for shard in shard_names_of(spec_for("prod"))
    ]
    workloads += [find(groups, "StatefulSet", alertmanager.NAME), find(groups, "Deployment", grafana.NAME)]
    for workload in workloads:
        pod = workload["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        name = workload["metadata"]["name"]
        whole = {"name": "access", "secret": {"secretName": credential.SECRET, "defaultMode": 0o444}}
        # Grafana sees only its two passwords and the generation's key (credential.grafana_volume).
        assert (credential.grafana_volume(0) if name == grafana.NAME else whole) in pod["volumes"]
        assert {"name": "access", "mountPath": credential.MOUNT_DIR, "readOnly": True} in container["volumeMounts"]
        if name == grafana.NAME:
            env = {e["name"]: e["value"] for e in container["env"]}
            assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
            assert (
                env["GF_SECURITY_ADMIN_PASSWORD__FILE"] == f"{credential.MOUNT_DIR}/{credential.GRAFANA_ADMIN_PASSWORD}"
            )
            continue
        assert web_config in container["args"], name
        # The kubelet's probes cannot present a credential over httpGet: each runs the image's own tool with it.
        for probe in ("readinessProbe", "livenessProbe"):
            if probe in container:
                command = container[probe]["exec"]["command"]
                assert command[0] in ("promtool", "amtool") and command[-1] == (
                    f"--http.config.file={credential.MOUNT_DIR}/{credential.CLIENT_CONFIG}"
                ), (name, probe)


def test_kube_state_metrics_serves_only_with_the_stacks_web_config_and_its_probe_asks_nothing_it_cannot_have():
    """On the design before this it had no --tls-config: /metrics (and /debug/pprof) answered anyone on the
    system pools."""
    pod = find(groups_for("prod"), "Deployment", exporters.KUBE_STATE_METRICS)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert f"--tls-config={credential.MOUNT_DIR}/{credential.WEB_CONFIG}" in container["args"]
    assert {"name": "access", "secret": {"secretName": credential.SECRET, "defaultMode": 0o444}} in pod["volumes"]
    assert {"name": "access", "mountPath": credential.MOUNT_DIR, "readOnly": True} in container["volumeMounts"]
    # Every path asks for the credential, so an httpGet probe would be refused with 401 and the pod never ready.
    assert not any("httpGet" in container.get(probe, {}) for probe in ("readinessProbe", "livenessProbe"))
    assert container["readinessProbe"] == {"tcpSocket": {"port": exporters.KUBE_STATE_METRICS_PORT}}


def test_alertmanager_gossips_only_over_mutual_tls_with_a_secret_no_other_pod_mounts():
    """On the design before this the gossip port took any peer that reached it (no --cluster.tls-config). The real
    Alertmanager's refusal of an outsider: tests/infra/test_alertmanager_mesh.py."""
    groups = groups_for("prod")
    statefulset = find(groups, "StatefulSet", alertmanager.NAME)
    pod = statefulset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert f"--cluster.tls-config={alertmanager.CONFIG_DIR}/{alertmanager.CLUSTER_TLS_CONFIG}" in container["args"]
    files = find(groups, "ConfigMap", alertmanager.NAME)["data"]
    tls = load_yaml(files[alertmanager.CLUSTER_TLS_CONFIG])
    mounted = f"{alertmanager.CLUSTER_TLS_DIR}/"
    assert tls["tls_server_config"]["client_auth_type"] == "RequireAndVerifyClientCert"
    assert tls["tls_server_config"]["client_ca_file"] == tls["tls_client_config"]["ca_file"] == mounted + "ca.crt"
    assert tls["tls_client_config"]["server_name"] == alertmanager.CLUSTER_SERVER_NAME
    assert {"name": "cluster-tls", "mountPath": alertmanager.CLUSTER_TLS_DIR, "readOnly": True} in container[
        "volumeMounts"
    ]
    mounts_it = [
        o["metadata"]["name"]
        for o in (o for objs in groups.values() for o in objs)
        for volume in ((o.get("spec") or {}).get("template") or {}).get("spec", {}).get("volumes", [])
        if (volume.get("secret") or {}).get("secretName") == alertmanager.CLUSTER_TLS_SECRET
    ]
    assert mounts_it == [alertmanager.NAME]


def test_the_rendered_web_and_client_configs_pass_the_real_promtool(tmp_path: Path):
    """Prometheus and Alertmanager read the same web-config format (exporter-toolkit); promtool checks it."""
    promtool = monitoring_tool("promtool")
    data = credential.secret_data("a-password", bcrypt_hash("a-password"), "another", 0)
    for key in (credential.WEB_CONFIG, credential.CLIENT_CONFIG):
        (tmp_path / key).write_text(data[key])
    result = _run([promtool, "check", "web-config", str(tmp_path / credential.WEB_CONFIG)], 60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert load_yaml(data[credential.CLIENT_CONFIG]) == {"basic_auth": credential.basic_auth()}
    (tmp_path / "unknown.yml").write_text(data[credential.WEB_CONFIG].replace("basic_auth_users", "basic_auth_user"))
    assert _run([promtool, "check", "web-config", str(tmp_path / "unknown.yml")], 60).returncode != 0
