"""Grafana dashboards as code: the JSON Grafana loads, rendered here, shipped in a ConfigMap.

Four boards: the control plane (apiservers, etcd main and events, backups), nodes and pools,
GPUs, and traffic accounting (the 7,500-node post's "where is the bottleneck" view: internet
against internal bytes per pool, and per namespace). Every board picks its Prometheus through a
``datasource`` variable: the control-plane board reads the control-plane shard, the others one
node shard at a time (docs/monitoring.md, "Dashboards"). The JSON is checked by decoding it
strictly with the Grafana Foundation SDK's dashboard model (tests/tools/go/grafana).
"""

from __future__ import annotations

import json
from typing import Any

from infra.addons.monitoring import rules
from infra.etcd.backup_metrics import LAST_SUCCESS_METRIC

# Grafana's dashboard JSON schema version this JSON is written for (Grafana 11's is 39).
SCHEMA_VERSION = 39
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
WIDTH, HEIGHT, COLUMNS = 12, 8, 2


def _panel(title: str, targets: list[tuple[str, str]], unit: str = "short", kind: str = "timeseries") -> dict[str, Any]:
    return {
        "type": kind,
        "title": title,
        "datasource": DATASOURCE,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [
            {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend, "datasource": DATASOURCE}
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def _board(uid: str, title: str, panels: list[dict[str, Any]], datasource_regex: str) -> dict[str, Any]:
    for i, panel in enumerate(panels):
        panel["id"] = i + 1
        panel["gridPos"] = {"h": HEIGHT, "w": WIDTH, "x": (i % COLUMNS) * WIDTH, "y": (i // COLUMNS) * HEIGHT}
    return {
        "uid": uid,
        "title": title,
        "tags": ["supercluster"],
        "timezone": "utc",
        "editable": False,
        "schemaVersion": SCHEMA_VERSION,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "1m",
        "annotations": {"list": []},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus shard",
                    "type": "datasource",
                    "query": "prometheus",
                    "regex": datasource_regex,
                }
            ]
        },
        "panels": panels,
    }


def control_plane() -> dict[str, Any]:
    api = f'job="{rules.JOB_APISERVER}"'
    etcd = f'job=~"{"|".join(rules.JOB_ETCD.values())}"'
    return _board(
        "supercluster-control-plane",
        "Control plane: apiservers and etcd",
        [
            _panel(
                "apiserver requests by code",
                [(f"sum by (code) (rate(apiserver_request_total{{{api}}}[5m]))", "{{code}}")],
                "reqps",
            ),
            _panel(
                "apiserver 429 and 5xx share",
                [
                    (
                        f'sum(rate(apiserver_request_total{{{api},code="429"}}[5m])) / sum(rate(apiserver_request_total{{{api}}}[5m]))',
                        "429",
                    ),
                    (
                        f'sum(rate(apiserver_request_total{{{api},code=~"5.."}}[5m])) / sum(rate(apiserver_request_total{{{api}}}[5m]))',
                        "5xx",
                    ),
                ],
                "percentunit",
            ),
            _panel(
                "apiserver p99 latency by verb",
                [
                    (
                        (
                            "histogram_quantile(0.99, sum by (verb, le) (rate(apiserver_request_duration_seconds_bucket"
                            f'{{{api},verb!~"WATCH|CONNECT"}}[5m])))'
                        ),
                        "{{verb}}",
                    )
                ],
                "s",
            ),
            _panel(
                "apiserver requests in flight (APF)",
                [
                    (
                        f"sum by (instance, request_kind) (apiserver_current_inflight_requests{{{api}}})",
                        "{{instance}} {{request_kind}}",
                    )
                ],
            ),
            _panel(
                "etcd database size against its quota",
                [
                    (f"etcd_mvcc_db_total_size_in_bytes{{{etcd}}}", "{{job}} {{instance}}"),
                    (f"max by (job) (etcd_server_quota_backend_bytes{{{etcd}}})", "{{job}} quota"),
                ],
                "bytes",
            ),
            _panel(
                "etcd backend commit p99",
                [
                    (
                        (
                            f"histogram_quantile(0.99, sum by (job, instance, le) (rate(etcd_disk_backend_commit_duration_seconds_bucket"
                            f"{{{etcd}}}[5m])))"
                        ),
                        "{{job}} {{instance}}",
                    )
                ],
                "s",
            ),
            _panel(
                "etcd WAL fsync p99",
                [
                    (
                        (
                            f"histogram_quantile(0.99, sum by (job, instance, le) (rate(etcd_disk_wal_fsync_duration_seconds_bucket"
                            f"{{{etcd}}}[5m])))"
                        ),
                        "{{job}} {{instance}}",
                    )
                ],
                "s",
            ),
            _panel(
                "etcd leader changes (1h)",
                [(f"max by (job) (increase(etcd_server_leader_changes_seen_total{{{etcd}}}[1h]))", "{{job}}")],
            ),
            _panel(
                "etcd backup age",
                [(f"time() - max by (etcd_cluster) ({LAST_SUCCESS_METRIC})", "{{etcd_cluster}}")],
                "s",
            ),
            _panel(
                "nodes Ready / not Ready",
                [
                    (
                        f'sum(kube_node_status_condition{{job="{rules.JOB_KUBE_STATE_METRICS}",condition="Ready",status="true"}})',
                        "Ready",
                    ),
                    (
                        (
                            f'count(kube_node_status_condition{{job="{rules.JOB_KUBE_STATE_METRICS}",condition="Ready",status="true"}} '
                            "== 0)"
                        ),
                        "not Ready",
                    ),
                ],
            ),
        ],
        "/.*control-plane.*/",
    )


def nodes() -> dict[str, Any]:
    ne = f'job="{rules.JOB_NODE_EXPORTER}"'
    return _board(
        "supercluster-nodes",
        "Nodes and pools",
        [
            _panel("nodes answering, by pool", [(f"sum by (pool) (up{{{ne}}})", "{{pool}}")]),
            _panel(
                "CPU busy, by pool",
                [(f'1 - avg by (pool) (rate(node_cpu_seconds_total{{{ne},mode="idle"}}[5m]))', "{{pool}}")],
                "percentunit",
            ),
            _panel(
                "memory available, by pool",
                [
                    (
                        f"avg by (pool) (node_memory_MemAvailable_bytes{{{ne}}} / node_memory_MemTotal_bytes{{{ne}}})",
                        "{{pool}}",
                    )
                ],
                "percentunit",
            ),
            _panel(
                "root disk used, worst node per pool",
                [
                    (
                        (
                            f'max by (pool) (1 - node_filesystem_avail_bytes{{{ne},mountpoint="/"}} / '
                            f'node_filesystem_size_bytes{{{ne},mountpoint="/"}})'
                        ),
                        "{{pool}}",
                    )
                ],
                "percentunit",
            ),
            _panel(
                "pods running per node, by pool",
                [(f'avg by (pool) (kubelet_running_pods{{job="{rules.JOB_KUBELET}"}})', "{{pool}}")],
            ),
            _panel(
                "kubelet client certificate lifetime left (lowest)",
                [
                    (
                        f'min by (pool) (kubelet_certificate_manager_client_ttl_seconds{{job="{rules.JOB_KUBELET}"}})',
                        "{{pool}}",
                    )
                ],
                "s",
            ),
            _panel(
                "NodeLocal DNS queries to Azure DNS, busiest node",
                [
                    (
                        (
                            f'max(sum by (node) (rate(coredns_proxy_request_duration_seconds_count{{job="{rules.JOB_NODE_LOCAL_DNS}",'
                            f'to="{rules.AZURE_DNS}:53"}}[5m])))'
                        ),
                        "busiest node",
                    )
                ],
                "reqps",
            ),
            _panel(
                "NAT hosts: conntrack use",
                [
                    (
                        f'node_nf_conntrack_entries{{{ne},role="nat-host"}} / node_nf_conntrack_entries_limit{{{ne},role="nat-host"}}',
                        "{{node}}",
                    )
                ],
                "percentunit",
            ),
        ],
        "/.*nodes.*/",
    )


def gpus() -> dict[str, Any]:
    dcgm = f'job="{rules.JOB_DCGM}"'
    return _board(
        "supercluster-gpus",
        "GPUs",
        [
            _panel(
                "GPU utilisation, by pool", [(f"avg by (pool) (DCGM_FI_DEV_GPU_UTIL{{{dcgm}}})", "{{pool}}")], "percent"
            ),
            _panel(
                "GPU memory used, by pool",
                [(f"sum by (pool) (DCGM_FI_DEV_FB_USED{{{dcgm}}})", "{{pool}}")],
                "decmbytes",
            ),
            _panel(
                "hottest GPU, by pool", [(f"max by (pool) (DCGM_FI_DEV_GPU_TEMP{{{dcgm}}})", "{{pool}}")], "celsius"
            ),
            _panel("GPU power, by pool", [(f"sum by (pool) (DCGM_FI_DEV_POWER_USAGE{{{dcgm}}})", "{{pool}}")], "watt"),
            _panel(
                "XID errors (last value, 1h)",
                [(f"max_over_time(DCGM_FI_DEV_XID_ERRORS{{{dcgm}}}[1h]) > 0", "{{node}} GPU {{gpu}}")],
                "short",
                "table",
            ),
            _panel("GPUs reporting, by pool", [(f"count by (pool) (DCGM_FI_DEV_GPU_UTIL{{{dcgm}}})", "{{pool}}")]),
        ],
        "/.*nodes.*/",
    )


def traffic() -> dict[str, Any]:
    ipt = f'job="{rules.JOB_IPTABLES}"'
    cadvisor = f'job="{rules.JOB_CADVISOR}"'
    return _board(
        "supercluster-traffic",
        "Traffic accounting: internet against internal",
        [
            _panel(
                "internet in and out, by pool",
                [
                    (
                        f'sum by (pool, traffic) (rate(iptables_rule_bytes_total{{{ipt},traffic=~"internet-.*"}}[5m]))',
                        "{{pool}} {{traffic}}",
                    )
                ],
                "Bps",
            ),
            _panel(
                "internal (VNet, Azure) in and out, by pool",
                [
                    (
                        f'sum by (pool, traffic) (rate(iptables_rule_bytes_total{{{ipt},traffic!~"internet-.*"}}[5m]))',
                        "{{pool}} {{traffic}}",
                    )
                ],
                "Bps",
            ),
            _panel(
                "busiest nodes to the internet",
                [
                    (
                        f'topk(10, sum by (node) (rate(iptables_rule_bytes_total{{{ipt},traffic="internet-out"}}[5m])))',
                        "{{node}}",
                    )
                ],
                "Bps",
            ),
            _panel(
                "pod network received, by namespace",
                [
                    (
                        f"sum by (namespace) (rate(container_network_receive_bytes_total{{{cadvisor}}}[5m]))",
                        "{{namespace}}",
                    )
                ],
                "Bps",
            ),
            _panel(
                "pod network sent, by namespace",
                [
                    (
                        f"sum by (namespace) (rate(container_network_transmit_bytes_total{{{cadvisor}}}[5m]))",
                        "{{namespace}}",
                    )
                ],
                "Bps",
            ),
        ],
        "/.*nodes.*/",
    )


def dashboards() -> dict[str, str]:
    """``{file name: dashboard JSON}``."""
    boards = {
        "control-plane.json": control_plane(),
        "nodes.json": nodes(),
        "gpus.json": gpus(),
        "traffic.json": traffic(),
    }
    return {name: json.dumps(board, indent=1, sort_keys=True) for name, board in boards.items()}
