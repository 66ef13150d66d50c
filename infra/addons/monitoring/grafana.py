"""Grafana: the rendered dashboards (dashboards.py) and one data source per Prometheus shard,
provisioned from files, read-only.

No anonymous access: its one user is the admin, whose password is the stack's Secret's
(credential.py), and every data source asks Prometheus with the stack's credential, read from the same
Secret by Grafana's ``$__file{}`` provisioning expansion, so no password is in a ConfigMap. The
provisioned dashboards cannot be edited, so Grafana holds no state worth keeping (an emptyDir). It is
reached with ``kubectl port-forward`` (a ClusterIP Service). Grafana reads both passwords only when it starts,
so a rotation restarts it, and only once the Secret holds the new ones (``credential.grafana_volume``).
"""

from __future__ import annotations

from infra.addons import images, k8s
from infra.addons.monitoring import credential, dashboards
from infra.addons.monitoring.rules import dump
from infra.addons.shared_names import SYSTEM_PRIORITY

NAME = "grafana"
PORT = 3000  # Grafana's http_port default
PROVISIONING_DIR = "/etc/grafana/provisioning"
DASHBOARDS_DIR = "/var/lib/grafana/dashboards"


def datasources(namespace: str, shards: list[str], prometheus: str, port: int) -> str:
    return dump(
        {
            "apiVersion": 1,
            "datasources": [
                {
                    "name": f"{prometheus}-{shard}",
                    "uid": f"{prometheus}-{shard}",
                    "type": "prometheus",
                    "access": "proxy",
                    "url": f"http://{prometheus}-{shard}.{namespace}.svc:{port}",
                    "basicAuth": True,
                    "basicAuthUser": credential.USER,
                    "secureJsonData": {"basicAuthPassword": f"$__file{{{credential.path(credential.PASSWORD)}}}"},
                    "editable": False,
                    "isDefault": index == 0,
                }
                for index, shard in enumerate(shards)
            ],
        }
    )


def dashboard_provider() -> str:
    return dump(
        {
            "apiVersion": 1,
            "providers": [
                {
                    "name": "supercluster",
                    "type": "file",
                    "disableDeletion": True,
                    "allowUiUpdates": False,
                    "options": {"path": DASHBOARDS_DIR},
                }
            ],
        }
    )


def objects(
    namespace: str, shards: list[str], prometheus: str, prometheus_port: int, password_rotation: int
) -> list[k8s.Obj]:
    boards = dashboards.dashboards()
    container = {
        "name": NAME,
        "image": images.GRAFANA,
        "env": [
            {"name": name, "value": value}
            for name, value in (
                ("GF_AUTH_ANONYMOUS_ENABLED", "false"),
                ("GF_SECURITY_ADMIN_USER", credential.GRAFANA_ADMIN),
                # Grafana reads a setting's value from the file a variable ending in __FILE names.
                ("GF_SECURITY_ADMIN_PASSWORD__FILE", credential.path(credential.GRAFANA_ADMIN_PASSWORD)),
                ("GF_USERS_ALLOW_SIGN_UP", "false"),
                ("GF_ANALYTICS_REPORTING_ENABLED", "false"),
                ("GF_ANALYTICS_CHECK_FOR_UPDATES", "false"),
                ("GF_PATHS_PROVISIONING", PROVISIONING_DIR),
            )
        ],
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "resources": k8s.resources("100m", "256Mi", "512Mi"),
        "securityContext": k8s.locked_down(),
        "readinessProbe": {"httpGet": {"path": "/api/health", "port": PORT}},
        "volumeMounts": [
            {"name": "datasources", "mountPath": f"{PROVISIONING_DIR}/datasources", "readOnly": True},
            {"name": "providers", "mountPath": f"{PROVISIONING_DIR}/dashboards", "readOnly": True},
            {"name": "dashboards", "mountPath": DASHBOARDS_DIR, "readOnly": True},
            {"name": "data", "mountPath": "/var/lib/grafana"},
            credential.volume_mount(),
        ],
    }
    pod = k8s.pod_spec(
        [container],
        priority_class=SYSTEM_PRIORITY,
        service_account=NAME,
        automountServiceAccountToken=False,
        **k8s.on_system_pool(),
        securityContext={"fsGroup": 65534},
        volumes=[
            {"name": "datasources", "configMap": {"name": f"{NAME}-datasources"}},
            {"name": "providers", "configMap": {"name": f"{NAME}-dashboard-provider"}},
            {"name": "dashboards", "configMap": {"name": f"{NAME}-dashboards"}},
            {"name": "data", "emptyDir": {"sizeLimit": "1Gi"}},
            credential.grafana_volume(password_rotation),
        ],
    )
    labels = {"app.kubernetes.io/name": NAME}
    return [
        # Its own account (CIS 5.1.5), with no token: Grafana reads Prometheus, never the apiserver.
        k8s.service_account(NAME, namespace, automount=False),
        k8s.config_map(
            f"{NAME}-datasources",
            namespace,
            {"prometheus.yaml": datasources(namespace, shards, prometheus, prometheus_port)},
            app=NAME,
        ),
        k8s.config_map(f"{NAME}-dashboard-provider", namespace, {"supercluster.yaml": dashboard_provider()}, app=NAME),
        k8s.config_map(f"{NAME}-dashboards", namespace, boards, app=NAME),
        k8s.deployment(NAME, namespace, 1, pod, labels),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": k8s.metadata(NAME, namespace),
            "spec": {
                "selector": labels,
                "ports": [{"name": "http", "port": PORT, "protocol": "TCP", "targetPort": PORT}],
            },
        },
    ]
