"""Alertmanager: who is paged, rendered from ``addons.monitoring.receivers``.

Every receiver's secret (a webhook URL, a PagerDuty routing key, a Teams webhook URL, an SMTP
password) lives in Key Vault under the name config gives; the configuration only names a file
(``*_file`` fields, read by Alertmanager when it sends), so neither the plan nor the ConfigMap
ever holds a secret. The files come from the Kubernetes Secret ``RECEIVER_SECRET``, one key per
Key Vault secret name, which the plan never declares (docs/monitoring.md, "Receivers").

The replicas gossip (silences, notification log) over mutual TLS only (``--cluster.tls-config``): each
presents the certificate of the Secret ``CLUSTER_TLS_SECRET``, signed by a CA of the mesh's own, and accepts
only a peer that presents one from that CA. Whoever else reaches the gossip port cannot join the mesh.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infra.addons.monitoring.rules import dump

NAME = "alertmanager"
PORT = 9093
CLUSTER_PORT = 9094  # Alertmanager's --cluster.listen-address default port (gossip between replicas)
CONFIG_DIR = "/etc/alertmanager"
SECRETS_DIR = f"{CONFIG_DIR}/secrets"
RECEIVER_SECRET = "alertmanager-receivers"
NULL_RECEIVER = "nobody"
# The gossip mesh's own credential: a CA the deploy makes for it alone and one certificate every replica presents,
# as server and as client (components/monitoring_access.py). Mounted by the Alertmanager pods only.
CLUSTER_TLS_SECRET = "alertmanager-cluster-tls"
CLUSTER_TLS_DIR = f"{CONFIG_DIR}/cluster-tls"
CLUSTER_TLS_CONFIG = "cluster-tls.yml"  # in the ConfigMap, beside alertmanager.yml
CLUSTER_CA, CLUSTER_CERT, CLUSTER_KEY = "ca.crt", "tls.crt", "tls.key"  # the Secret's keys
# The name each replica's certificate carries and every dialling replica checks: peers are dialled by address.
CLUSTER_SERVER_NAME = f"{NAME}-cluster"
RECEIVER_TYPES = ("webhook", "email", "pagerduty", "msteams")
SEVERITIES = ("critical", "warning")


@dataclass(frozen=True)
class Receiver:
    name: str
    type: str  # one of RECEIVER_TYPES
    secret: str  # Key Vault secret name: the URL, routing key or SMTP password
    severities: tuple[str, ...] = SEVERITIES
    to: str = ""  # email only
    sender: str = ""  # email only
    smarthost: str = ""  # email only, host:port
    username: str = ""  # email only


def _receiver(r: Receiver) -> dict[str, Any]:
    secret_file = f"{SECRETS_DIR}/{r.secret}"
    if r.type == "webhook":
        return {"name": r.name, "webhook_configs": [{"url_file": secret_file, "send_resolved": True}]}
    if r.type == "pagerduty":
        return {"name": r.name, "pagerduty_configs": [{"routing_key_file": secret_file, "send_resolved": True}]}
    if r.type == "msteams":
        return {"name": r.name, "msteams_configs": [{"webhook_url_file": secret_file, "send_resolved": True}]}
    return {
        "name": r.name,
        "email_configs": [
            {
                "to": r.to,
                "from": r.sender,
                "smarthost": r.smarthost,
                "auth_username": r.username or r.sender,
                "auth_password_file": secret_file,
                "require_tls": True,
                "send_resolved": True,
            }
        ],
    }


def config(receivers: tuple[Receiver, ...], cluster_name: str) -> str:
    """A routing tree: every alert grouped by name and cluster; each receiver gets the severities
    it asked for (``continue`` so several receivers can take the same alert); nothing else is sent."""
    routes = [
        {"receiver": r.name, "matchers": [f'severity=~"{"|".join(r.severities)}"'], "continue": True} for r in receivers
    ]
    document = {
        "global": {"resolve_timeout": "5m"},
        "route": {
            "receiver": NULL_RECEIVER,
            "group_by": ["alertname", "cluster"],
            "group_wait": "30s",
            "group_interval": "5m",
            "repeat_interval": "4h",
            "routes": routes,
        },
        # A warning is not worth hearing while the same alert is critical for the same target.
        "inhibit_rules": [
            {
                "source_matchers": ['severity="critical"'],
                "target_matchers": ['severity="warning"'],
                "equal": ["alertname", "cluster", "instance"],
            }
        ],
        "receivers": [{"name": NULL_RECEIVER}, *(_receiver(r) for r in receivers)],
    }
    del cluster_name  # the cluster label comes with every alert (Prometheus external_labels)
    return dump(document)


def peer_addresses(namespace: str, replicas: int) -> list[str]:
    """Each replica by its stable StatefulSet DNS name under the headless Service."""
    return [f"{NAME}-{i}.{NAME}.{namespace}.svc:{CLUSTER_PORT}" for i in range(replicas)]


def api_addresses(namespace: str, replicas: int) -> list[str]:
    return [f"{NAME}-{i}.{NAME}.{namespace}.svc:{PORT}" for i in range(replicas)]


def cluster_tls_config() -> str:
    """``--cluster.tls-config`` (Alertmanager 0.28's gossip over TLS, marked experimental there): the server asks
    every peer for a certificate from the mesh's CA (``RequireAndVerifyClientCert``), the client presents the same
    certificate and verifies the peer's against that CA under ``CLUSTER_SERVER_NAME``. The files are re-read at each
    handshake, so a renewed certificate needs no restart; the CA is read once, at start."""
    ca, cert, key = (f"{CLUSTER_TLS_DIR}/{name}" for name in (CLUSTER_CA, CLUSTER_CERT, CLUSTER_KEY))
    return dump(
        {
            "tls_server_config": {
                "cert_file": cert,
                "key_file": key,
                "client_auth_type": "RequireAndVerifyClientCert",
                "client_ca_file": ca,
            },
            "tls_client_config": {
                "cert_file": cert,
                "key_file": key,
                "ca_file": ca,
                "server_name": CLUSTER_SERVER_NAME,
            },
        }
    )


def cluster_tls_data(ca_pem: str, cert_pem: str, key_pem: str) -> dict[str, str]:
    """The Secret's files, from the deploy's CA certificate and the replicas' certificate and key."""
    return {CLUSTER_CA: ca_pem, CLUSTER_CERT: cert_pem, CLUSTER_KEY: key_pem}
