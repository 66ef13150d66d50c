"""How many Prometheus servers a cluster needs, and what each one scrapes.

One **control-plane** shard scrapes the cluster-level targets (apiservers, the schedulers and
controller-managers, both etcd clusters and their backup metrics, CoreDNS, the autoscaler,
kube-state-metrics). ``N`` **node** shards share
the per-node agents (node-exporter, kubelet, cAdvisor, DCGM, NodeLocal DNS, iptables exporter):
each keeps the nodes whose name hashes to its index (``hashmod``), so a node's series all land
on one shard and adding nodes spreads evenly.

The series per node are *bounded*, not estimated: every node job keeps only the metrics it
names and carries a ``sample_limit`` (Prometheus fails a scrape that returns more, so a target
can never exceed it). ``N`` is derived from those bounds, the pools' ``maxNodes`` and the
series budget of one shard: docs/monitoring.md shows the arithmetic at 7,500 nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from infra.addons.monitoring import credential, rules
from infra.facts.labels import GPU_PRESENT_LABEL, POOL_LABEL, ROLE_LABEL

ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# The cluster CA, which the service-account volume carries next to the token (--root-ca-file).
ACCOUNT_CA = f"{ACCOUNT_DIR}/ca.crt"
# Ports: node-exporter's registered default (prometheus/prometheus wiki "Default port allocations");
# the kubelet's HTTPS port (kubelet --port default 10250); dcgm-exporter's default listen address :9400.
NODE_EXPORTER_PORT = 9100
KUBELET_PORT = 10250
DCGM_EXPORTER_PORT = 9400


@dataclass(frozen=True)
class NodeJob:
    """A per-node agent: its port and scheme, the metrics kept and the most series one node may return."""

    job: str
    port: int
    sample_limit: int
    keep: str | None = None
    path: str = "/metrics"
    https: bool = False
    gpu_only: bool = False


def node_jobs(node_local_dns_port: int, iptables_port: int) -> tuple[NodeJob, ...]:
    """The series bounds are this project's sizing, enforced by Prometheus (``sample_limit`` counts
    the samples left after ``keep``): a 96-vCPU GPU VM's per-CPU counters alone are 96 x 8 modes =
    768 series of node_cpu_seconds_total. The keep lists are what the rules and dashboards use."""
    return (
        NodeJob(
            rules.JOB_NODE_EXPORTER,
            NODE_EXPORTER_PORT,
            2_500,
            keep="node_cpu_seconds_total|node_memory_.*|node_filesystem_(avail|size)_bytes|node_nf_conntrack_.*|"
            "node_network_(receive|transmit)_(bytes|errs|drop)_total|node_load(1|5|15)|"
            "node_disk_(read|written)_bytes_total|node_disk_io_time_seconds_total|node_boot_time_seconds",
        ),
        NodeJob(
            rules.JOB_KUBELET,
            KUBELET_PORT,
            500,
            https=True,
            keep="kubelet_certificate_manager_.*|kubelet_running_pods|kubelet_node_name|"
            "kubelet_pleg_relist_duration_seconds_(bucket|count|sum)",
        ),
        NodeJob(
            rules.JOB_CADVISOR,
            KUBELET_PORT,
            1_000,
            path="/metrics/cadvisor",
            https=True,
            keep="container_cpu_usage_seconds_total|container_memory_working_set_bytes|"
            "container_network_(receive|transmit)_bytes_total",
        ),
        NodeJob(rules.JOB_DCGM, DCGM_EXPORTER_PORT, 500, gpu_only=True),
        NodeJob(
            rules.JOB_NODE_LOCAL_DNS,
            node_local_dns_port,
            500,
            keep="coredns_dns_.*|coredns_proxy_.*|coredns_cache_.*|coredns_forward_.*",
        ),
        NodeJob(rules.JOB_IPTABLES, iptables_port, 200, keep="iptables_rule_.*|iptables_exporter_.*"),
    )


def series_per_node(jobs: tuple[NodeJob, ...]) -> int:
    return sum(job.sample_limit for job in jobs)


def node_shard_count(max_nodes: int, per_node: int, series_per_shard: int) -> int:
    return max(1, math.ceil(max_nodes * per_node / series_per_shard))


# ----------------------------------------------------------------------------- scrape jobs


def _label_name(label: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in label)


def node_scrape_config(job: NodeJob, shard: int, shards: int) -> dict[str, Any]:
    relabel: list[dict[str, Any]] = [
        {
            "source_labels": ["__meta_kubernetes_node_name"],
            "modulus": shards,
            "target_label": "__tmp_shard",
            "action": "hashmod",
        },
        {"source_labels": ["__tmp_shard"], "regex": str(shard), "action": "keep"},
    ]
    if job.gpu_only:
        relabel.append(
            {
                "source_labels": [f"__meta_kubernetes_node_label_{_label_name(GPU_PRESENT_LABEL)}"],
                "regex": "true",
                "action": "keep",
            }
        )
    relabel += [
        {
            "source_labels": ["__address__"],
            "regex": "(.+):[0-9]+",
            "replacement": f"${{1}}:{job.port}",
            "target_label": "__address__",
        },
        {"source_labels": ["__meta_kubernetes_node_name"], "target_label": "node"},
        {"source_labels": [f"__meta_kubernetes_node_label_{_label_name(ROLE_LABEL)}"], "target_label": "role"},
        {"source_labels": [f"__meta_kubernetes_node_label_{_label_name(POOL_LABEL)}"], "target_label": "pool"},
    ]
    config: dict[str, Any] = {
        "job_name": job.job,
        "metrics_path": job.path,
        "sample_limit": job.sample_limit,
        "kubernetes_sd_configs": [{"role": "node"}],
        "relabel_configs": relabel,
    }
    if job.https:
        config["scheme"] = "https"
        config["authorization"] = {"credentials_file": f"{ACCOUNT_DIR}/token"}
        # The kubelet's serving certificate is from the cluster CA (serverTLSBootstrap), for its Node's
        # addresses only (infra/control_plane/csr_approval.py): the target, a node address, is verified.
        config["tls_config"] = {"ca_file": ACCOUNT_CA}
    if job.keep:
        config["metric_relabel_configs"] = [{"source_labels": ["__name__"], "regex": job.keep, "action": "keep"}]
    return config


def pod_scrape_config(job: str, namespace: str, selector: str, port_name: str) -> dict[str, Any]:
    return {
        "job_name": job,
        "kubernetes_sd_configs": [
            {"role": "pod", "namespaces": {"names": [namespace]}, "selectors": [{"role": "pod", "label": selector}]}
        ],
        "relabel_configs": [
            {"source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": port_name, "action": "keep"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
        ],
    }


def static_scrape_config(job: str, targets: list[str], **labels: str) -> dict[str, Any]:
    group: dict[str, Any] = {"targets": targets}
    if labels:
        group["labels"] = labels
    return {"job_name": job, "static_configs": [group]}


def peer_scrape_config(targets: dict[str, list[str]]) -> dict[str, Any]:
    """Other shards' replicas (``{shard: targets}``), for their ``up`` alone: every sample scraped is
    dropped (``up`` and the other scrape series are written before metric relabelling), so watching
    a shard costs a handful of series."""
    return {
        "job_name": rules.JOB_PROMETHEUS_PEERS,
        "static_configs": [{"targets": t, "labels": {"shard": shard}} for shard, t in targets.items()],
        "metric_relabel_configs": [{"source_labels": ["__name__"], "regex": ".+", "action": "drop"}],
    }


def authenticated(job: dict[str, Any]) -> dict[str, Any]:
    """``job`` scraping the monitoring stack itself, whose APIs ask for its credential (credential.py)."""
    return {**job, "basic_auth": credential.basic_auth()}


def etcd_backup_scrape_config(targets: list[str]) -> dict[str, Any]:
    """The series carry ``cluster`` (main or events): renamed ``etcd_cluster`` here, or the
    Kubernetes cluster's external label ``cluster`` would never be added to their alerts."""
    return {
        "job_name": rules.JOB_ETCD_BACKUP,
        "static_configs": [{"targets": targets}],
        "metric_relabel_configs": [
            {"source_labels": ["cluster"], "target_label": "etcd_cluster"},
            {"regex": "cluster", "action": "labeldrop"},
        ],
    }


# The apiservers' endpoints: the ``kubernetes`` Service's EndpointSlice in ``default``, its ``https`` port.
_KUBERNETES_SERVICE_HTTPS = [
    {
        "source_labels": ["__meta_kubernetes_service_name", "__meta_kubernetes_endpointslice_port_name"],
        "regex": "kubernetes;https",
        "action": "keep",
    }
]


def component_scrape_config(job: str, port: int) -> dict[str, Any]:
    """kube-scheduler or kube-controller-manager on each apiserver machine, found as the apiserver is: each
    apiserver's address in the ``kubernetes`` Service's EndpointSlice (its --advertise-address, the machine's
    own; the lease endpoint reconciler keeps only live apiservers there), on the component's secure port.
    Scale-set instances come and go with repairs and rolling upgrades: nothing here names one. Authentication
    and authorization are delegated to the apiserver (``--authentication-kubeconfig``,
    ``--authorization-kubeconfig``): Prometheus's service-account token, and its ClusterRole's get on /metrics,
    let it in."""
    return {
        "job_name": job,
        "scheme": "https",
        "kubernetes_sd_configs": [{"role": "endpointslice", "namespaces": {"names": ["default"]}}],
        "authorization": {"credentials_file": f"{ACCOUNT_DIR}/token"},
        # Neither is given a certificate (infra/control_plane/pki.py issues none for serving): with no
        # --tls-cert-file and an empty certificate directory (their options.go) each generates one in
        # memory at every start, signed by a CA of its own made at the same time (k8s.io/apiserver
        # pkg/server/options/serving.go MaybeDefaultWithSelfSignedCerts), so there is no stable CA to
        # check against. The token only goes to the apiservers' own addresses, which only apiservers
        # (and cluster admins) write into that EndpointSlice.
        "tls_config": {"insecure_skip_verify": True},
        "relabel_configs": [*_KUBERNETES_SERVICE_HTTPS, _port_of_address(port)],
    }


def _port_of_address(port: int) -> dict[str, Any]:
    """The apiserver's address the EndpointSlice names, on another port of the same machine."""
    return {
        "source_labels": ["__address__"],
        "regex": "(.+):[0-9]+",
        "target_label": "__address__",
        "replacement": f"${{1}}:{port}",
    }


def token_minter_scrape_config(port: int) -> dict[str, Any]:
    """The bootstrap-token minter on each apiserver machine, found as the components are (the ``kubernetes``
    Service's EndpointSlice), on its plain-HTTP port: the mint time it serves is no secret, and the NSG admits only
    the monitoring pools to it."""
    return {
        "job_name": rules.JOB_TOKEN_MINTER,
        "scheme": "http",
        "kubernetes_sd_configs": [{"role": "endpointslice", "namespaces": {"names": ["default"]}}],
        "relabel_configs": [*_KUBERNETES_SERVICE_HTTPS, _port_of_address(port)],
    }


def apiserver_scrape_config() -> dict[str, Any]:
    return {
        "job_name": rules.JOB_APISERVER,
        "scheme": "https",
        "kubernetes_sd_configs": [{"role": "endpointslice", "namespaces": {"names": ["default"]}}],
        "authorization": {"credentials_file": f"{ACCOUNT_DIR}/token"},
        "tls_config": {"ca_file": ACCOUNT_CA},
        "relabel_configs": _KUBERNETES_SERVICE_HTTPS,
    }
