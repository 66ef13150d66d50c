"""kubeconfig files: component ones that point at files on the VM, and self-contained ones (break-glass).

A component kubeconfig holds only the server URL and paths; the certificate and key it names
arrive from Key Vault, so the file itself is safe in customData. The co-located
controller-manager and scheduler talk to the apiserver on loopback: an Azure internal load
balancer does not send a backend's own traffic back to itself (no hairpinning), and loopback
keeps them working when the load balancer is the thing that is broken.
"""

from __future__ import annotations

import base64
from typing import Any

from infra.boot import yaml_text
from infra.facts.endpoints import LOCAL_APISERVER

CLUSTER_NAME = "supercluster"


def document(server: str, user: str, cluster: dict[str, Any], credentials: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CLUSTER_NAME, "cluster": {"server": server, **cluster}}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": f"{user}@{CLUSTER_NAME}", "context": {"cluster": CLUSTER_NAME, "user": user}}],
        "current-context": f"{user}@{CLUSTER_NAME}",
        "preferences": {},
    }


def file_kubeconfig(user: str, ca_file: str, cert_file: str, key_file: str, server: str = LOCAL_APISERVER) -> str:
    return yaml_text.dump(
        document(
            server, user, {"certificate-authority": ca_file}, {"client-certificate": cert_file, "client-key": key_file}
        ),
        sort_keys=False,
    )


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def embedded_kubeconfig(server: str, user: str, ca_pem: str, cert_pem: str, key_pem: str) -> str:
    """A self-contained kubeconfig (an operator's break-glass one, ``plan/credential.py``). Its key makes
    it a secret: it is written to the operator's own disk, never to state."""
    return yaml_text.dump(
        document(
            server,
            user,
            {"certificate-authority-data": b64(ca_pem)},
            {"client-certificate-data": b64(cert_pem), "client-key-data": b64(key_pem)},
        ),
        sort_keys=False,
    )
