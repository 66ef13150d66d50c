"""Traffic accounting: publishes the node's mangle-table counters (internet in/out) to Prometheus.

The node network renderer installs the 7,500-node post's mangle rules, each carrying a
comment ``iptables-exporter ... traffic=internet-in`` (or ``internet-out``); iptables counts
packets and bytes per rule. This DaemonSet runs machine/addons/iptables_exporter.py on every node. The node itself
dumps the counters with its own ``iptables-save`` (nf_tables on Ubuntu 24.04, which the original
python-iptables exporter cannot read) into one file under /run (infra/network/traffic_counters.py);
the exporter mounts only that directory, read-only, and runs as nobody with no capability, a
read-only root and no apiserver access. Host network only so Prometheus finds it at the node's
address, like the other node agents.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import machine
from infra.addons import images, k8s
from infra.addons.settings import section
from infra.addons.shared_names import NODE_CRITICAL, SYSTEM_NAMESPACE
from infra.config.cluster_config import ClusterConfig
from infra.network.traffic_counters import COUNTERS_DIR, COUNTERS_FILE, COUNTERS_INTERVAL_SECONDS

KEY = "trafficAccounting"
NAME = "iptables-exporter"
SCRIPT = machine.path("addons/iptables_exporter.py")
DEFAULT_PORT = 9119  # the port iptables-exporter has always used


@dataclass(frozen=True)
class Settings:
    port: int = DEFAULT_PORT


def parse(raw: Mapping[str, Any], config: ClusterConfig) -> Settings:
    s = section(KEY, raw)
    settings = Settings(port=s.integer("port", DEFAULT_PORT, minimum=1025, maximum=65535))
    s.done()
    return settings


def objects(settings: Settings) -> list[k8s.Obj]:
    ns = SYSTEM_NAMESPACE
    container = {
        "name": NAME,
        "image": images.PYTHON,
        "command": ["python3", "/opt/iptables-exporter/iptables_exporter.py"],
        "env": [
            {"name": "COUNTERS_FILE", "value": COUNTERS_FILE},
            # Three missed rewrites: the node's publisher has stopped, say so rather than look idle.
            {"name": "MAX_AGE_SECONDS", "value": str(3 * COUNTERS_INTERVAL_SECONDS)},
            {"name": "PORT", "value": str(settings.port)},
        ],
        "ports": [{"name": "metrics", "containerPort": settings.port, "protocol": "TCP"}],
        "resources": k8s.resources("10m", "32Mi", "64Mi"),
        # It reads a file: no root, no capability (the node's iptables-save holds those).
        "securityContext": {**k8s.locked_down(), **k8s.RUNTIME_DEFAULT_SECCOMP},
        "readinessProbe": {"httpGet": {"path": "/metrics", "port": settings.port}, "periodSeconds": 30},
        "volumeMounts": [
            {"name": "script", "mountPath": "/opt/iptables-exporter", "readOnly": True},
            {"name": "counters", "mountPath": COUNTERS_DIR, "readOnly": True},
        ],
    }
    pod = k8s.pod_spec(
        [container],
        priority_class=NODE_CRITICAL,
        service_account=NAME,
        host_network=True,
        automountServiceAccountToken=False,
        tolerations=k8s.tolerate_everything(),
        volumes=[
            {"name": "script", "configMap": {"name": NAME}},
            # The node's publisher creates it; created empty if the pod comes first (reported as not fresh).
            {"name": "counters", "hostPath": {"path": COUNTERS_DIR, "type": "DirectoryOrCreate"}},
        ],
    )
    return [
        k8s.service_account(NAME, ns, automount=False),
        k8s.config_map(NAME, ns, {"iptables_exporter.py": SCRIPT.read_text()}),
        k8s.daemon_set(NAME, ns, pod, {"app.kubernetes.io/name": NAME}, "10%"),
    ]
