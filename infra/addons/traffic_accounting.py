"""Traffic accounting: publishes the node's mangle-table counters (internet in/out) to Prometheus.

The node network renderer installs the 7,500-node post's mangle rules, each carrying a
comment ``iptables-exporter ... traffic=internet-in`` (or ``internet-out``); iptables counts
packets and bytes per rule. This DaemonSet runs machine/addons/iptables_exporter.py on every node:
host network (it must see the host's tables), the host's root mounted read-only so it can
run the node's own ``iptables-save`` (nf_tables on Ubuntu 24.04, which the original
python-iptables exporter cannot read), and no apiserver access at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import machine
from infra.addons import images, k8s
from infra.addons.labels import NODE_CRITICAL, SYSTEM_NAMESPACE
from infra.addons.settings import section
from infra.config import ClusterConfig

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
        "name": NAME, "image": images.PYTHON, "command": ["python3", "/opt/iptables-exporter/iptables_exporter.py"],
        "env": [{"name": "HOST_ROOT", "value": "/host"}, {"name": "PORT", "value": str(settings.port)}],
        "ports": [{"name": "metrics", "containerPort": settings.port, "protocol": "TCP"}],
        "resources": k8s.resources("10m", "32Mi", "64Mi"),
        # iptables-save needs root and NET_ADMIN (netlink dump of the tables), chroot needs SYS_CHROOT.
        "securityContext": k8s.locked_down("NET_ADMIN", "NET_RAW", "SYS_CHROOT", as_nobody=False),
        "readinessProbe": {"httpGet": {"path": "/metrics", "port": settings.port}, "periodSeconds": 30},
        "volumeMounts": [
            {"name": "script", "mountPath": "/opt/iptables-exporter", "readOnly": True},
            {"name": "host", "mountPath": "/host", "readOnly": True, "mountPropagation": "None"},
        ],
    }
    pod = k8s.pod_spec(
        [container], priority_class=NODE_CRITICAL, service_account=NAME, host_network=True,
        automountServiceAccountToken=False,
        tolerations=k8s.tolerate_everything(),
        volumes=[
            {"name": "script", "configMap": {"name": NAME}},
            {"name": "host", "hostPath": {"path": "/", "type": "Directory"}},
        ],
    )
    return [
        k8s.service_account(NAME, ns, automount=False),
        k8s.config_map(NAME, ns, {"iptables_exporter.py": SCRIPT.read_text()}),
        k8s.daemon_set(NAME, ns, pod, {"app.kubernetes.io/name": NAME}, "10%"),
    ]
