"""Who may call the monitoring stack's APIs: one credential of the stack's own, never in the plan.

Prometheus and Alertmanager serve their APIs only to the user ``USER`` (HTTP basic auth, checked
against a bcrypt hash in each tool's ``--web.config.file``); Grafana admits its own admin and no
anonymous visitor. Every client the program renders (Prometheus's alerting and its scrapes of the
stack itself, Grafana's data sources, the pods' probes) reads the password from a file of the
Kubernetes Secret ``SECRET``, mounted at ``MOUNT_DIR``. The deploy makes the values (a random password,
its bcrypt hash, Grafana's admin password) and declares the Secret with them; the plan and the provider
mask the Secret's data.
"""

from __future__ import annotations

from typing import Any

from infra.addons import k8s
from infra.addons.monitoring.rules import dump

SECRET = "monitoring-access"
MOUNT_DIR = "/etc/monitoring-access"
USER = "monitoring"
# The keys of SECRET, each a file under MOUNT_DIR.
PASSWORD = "password"
WEB_CONFIG = "web-config.yml"  # Prometheus's and Alertmanager's --web.config.file
CLIENT_CONFIG = "client.yml"  # promtool's and amtool's --http.config.file (the pods' probes)
GRAFANA_ADMIN_PASSWORD = "grafana-admin-password"
GRAFANA_ADMIN = "admin"
# A key naming the passwords' generation (``addons.monitoring.passwordRotation``): see grafana_volume.
ROTATION_PREFIX = "rotation-"


def path(key: str) -> str:
    return f"{MOUNT_DIR}/{key}"


def basic_auth() -> dict[str, str]:
    """A client's credentials in Prometheus's and the tools' HTTP client configuration."""
    return {"username": USER, "password_file": path(PASSWORD)}


def secret_data(password: str, password_bcrypt: str, grafana_admin_password: str, rotation: int) -> dict[str, str]:
    """The Secret's files, from the deploy's values (``password_bcrypt``: the password's bcrypt hash) and the
    generation they belong to (``rotation``)."""
    return {
        PASSWORD: password,
        WEB_CONFIG: dump({"basic_auth_users": {USER: password_bcrypt}}),
        CLIENT_CONFIG: dump({"basic_auth": basic_auth()}),
        GRAFANA_ADMIN_PASSWORD: grafana_admin_password,
        rotation_key(rotation): str(rotation),
    }


def rotation_key(rotation: int) -> str:
    return f"{ROTATION_PREFIX}{rotation}"


def volume() -> dict[str, Any]:
    return {"name": "access", "secret": {"secretName": SECRET, "defaultMode": 0o444}}


def grafana_volume(rotation: int) -> dict[str, Any]:
    """Grafana's view of the Secret: its two passwords, and the generation's key. Grafana reads the passwords only
    at start, so a rotation must restart it after the Secret changed: naming the new generation's key changes the
    pod template (a restart), and the kubelet mounts a Secret volume only once every item it names exists, so the
    new pod waits for the Secret with the new passwords whatever order the deploy applies the two in. Prometheus,
    Alertmanager and kube-state-metrics read the files at each request and mount the whole Secret: no restart."""
    items = [PASSWORD, GRAFANA_ADMIN_PASSWORD]
    return {
        "name": "access",
        "secret": {
            "secretName": SECRET,
            "defaultMode": 0o444,
            "items": [
                *({"key": key, "path": key} for key in items),
                {"key": rotation_key(rotation), "path": "rotation"},
            ],
        },
    }


def volume_mount() -> dict[str, Any]:
    return {"name": "access", "mountPath": MOUNT_DIR, "readOnly": True}


def secret(namespace: str, data: Any, name: str = SECRET) -> dict[str, Any]:
    """The Secret; ``data``: ``secret_data``'s files (a Pulumi output in the deploy, masked in the plan). Also the
    Alertmanager mesh's (``alertmanager.CLUSTER_TLS_SECRET``, ``alertmanager.cluster_tls_data``'s files)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": k8s.metadata(name, namespace),
        "type": "Opaque",
        "stringData": data,
    }
