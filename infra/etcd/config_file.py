"""etcd's own YAML config file (``etcd --config-file``): every setting that matters at scale.

Keys are etcd's flag names. Durations inside the file are integers of nanoseconds (etcd
decodes them into Go ``time.Duration``; "2h" is refused), except the compaction retention,
which etcd reads as a string. The file is a pure function of config and the address plan:
the member tool derives the effective file for a rejoin from it (``initial-cluster-state``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from infra.boot import yaml_text
from infra.etcd.certificates import (
    CA_FILE,
    CLIENT_CAS_FILE,
    PEER_CERT_FILE,
    PEER_KEY_FILE,
    SERVER_CERT_FILE,
    SERVER_KEY_FILE,
)
from infra.etcd.spec import EtcdClusterSpec, EtcdMember

# The local SSD is mounted here (machine.py); the WAL lives in the data dir on the same device.
MOUNT_POINT = "/var/lib/etcd"
DATA_DIR = f"{MOUNT_POINT}/data"
BACKUP_DIR = f"{MOUNT_POINT}/backups"
CONFIG_PATH = "/etc/etcd/etcd.yaml"

# Azure: OpenShift's etcd operator runs 500 ms heartbeats and a 2,500 ms election timeout on Azure
# (openshift/cluster-etcd-operator pkg/etcdenvvar/etcd_env.go, getHeartbeatInterval/getElectionTimeout,
# case status.Azure); etcd's defaults (100/1000 ms) assume a LAN and flap leaders on cloud networks.
HEARTBEAT_INTERVAL_MS = 500
ELECTION_TIMEOUT_MS = 2500
# How long a member holds a request it cannot commit before answering "request timed out": 5 s plus
# two election timeouts (go.etcd.io/etcd/server/v3 config/config.go, ServerConfig.ReqTimeout), 10 s
# here. A write already sent to a leader that died waits this long (the fault suite measured it:
# docs/reliability.md), whatever happens meanwhile.
REQUEST_TIMEOUT_S = 5 + 2 * ELECTION_TIMEOUT_MS / 1000
# Snapshot to disk every 10,000 applied entries (GCE kube-up's etcd.manifest, ETCD_SNAPSHOT_COUNT):
# a tenth of etcd 3.5's default, so followers catch up from a small log and memory stays flat.
SNAPSHOT_COUNT = 10_000
# Compaction is owned by etcd, not the apiserver (spec.APISERVER_COMPACTION_INTERVAL disables the
# apiserver's compactor): it keeps working for the Events cluster and while apiservers are down.
# 5 minutes of history is the apiserver's own default interval (--etcd-compaction-interval=5m).
AUTO_COMPACTION_MODE = "periodic"
AUTO_COMPACTION_RETENTION = "5m"
# Corruption checks (etcd op-guide/data_corruption.md): compare hashes with peers before serving,
# periodically ("a couple of hours"), and after every compaction (leader checks followers).
CORRUPT_CHECK_PERIOD = timedelta(hours=2)
# Progress notifications on watches every 5 s, as kubeadm configures for the apiserver's watch cache.
WATCH_PROGRESS_NOTIFY_INTERVAL = timedelta(seconds=5)


def nanoseconds(duration: timedelta) -> int:
    return int(duration.total_seconds()) * 1_000_000_000


def etcd_config(cluster: EtcdClusterSpec, member: EtcdMember) -> dict[str, Any]:
    """The config file of ``member``, as a dict in etcd's own key names."""
    return {
        "name": member.name,
        "data-dir": DATA_DIR,
        "listen-client-urls": member.client_url,
        "advertise-client-urls": member.client_url,
        "listen-peer-urls": member.peer_url,
        "initial-advertise-peer-urls": member.peer_url,
        # Plain HTTP /metrics and /health for Prometheus; nothing secret is served there.
        "listen-metrics-urls": member.metrics_url,
        # Histograms too (gRPC latency), which the etcd mixin's etcdGRPCRequestsSlow alert needs.
        "metrics": "extensive",
        "initial-cluster": cluster.initial_cluster,
        "initial-cluster-token": cluster.token,
        "initial-cluster-state": "new",
        # Refuse membership changes that would lose quorum (a rejoin removes, then adds, a member).
        "strict-reconfig-check": True,
        # The 2,500-node post: the 2 GB default filled up and etcd stopped taking writes.
        "quota-backend-bytes": cluster.config.quota_backend_bytes,
        "auto-compaction-mode": AUTO_COMPACTION_MODE,
        "auto-compaction-retention": AUTO_COMPACTION_RETENTION,
        "snapshot-count": SNAPSHOT_COUNT,
        "heartbeat-interval": HEARTBEAT_INTERVAL_MS,
        "election-timeout": ELECTION_TIMEOUT_MS,
        "experimental-initial-corrupt-check": True,
        "experimental-corrupt-check-time": nanoseconds(CORRUPT_CHECK_PERIOD),
        "experimental-compact-hash-check-enabled": True,
        "experimental-watch-progress-notify-interval": nanoseconds(WATCH_PROGRESS_NOTIFY_INTERVAL),
        # TLS everywhere (CIS 2.1-2.6). The client port admits this cluster's members and the apiserver's
        # client certificate; the peer port this cluster's members only (certificates.py).
        "client-transport-security": {
            "cert-file": SERVER_CERT_FILE,
            "key-file": SERVER_KEY_FILE,
            "trusted-ca-file": CLIENT_CAS_FILE,
            "client-cert-auth": True,
            "auto-tls": False,
        },
        "peer-transport-security": {
            "cert-file": PEER_CERT_FILE,
            "key-file": PEER_KEY_FILE,
            "trusted-ca-file": CA_FILE,
            "client-cert-auth": True,
            "auto-tls": False,
        },
        "tls-min-version": "TLS1.3",
        "logger": "zap",
        "log-level": "info",
        "log-outputs": ["stderr"],
    }


def render_config(config: dict[str, Any]) -> str:
    return yaml_text.dump(config, sort_keys=False, default_flow_style=False, width=4096)
