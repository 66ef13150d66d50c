"""Who approves a kubelet's serving certificate: a program on every apiserver VM, with its own narrow RBAC.

Each kubelet asks the cluster CA for its serving certificate (``serverTLSBootstrap``, infra/node/kubelet.py)
through a ``kubernetes.io/kubelet-serving`` CSR. kube-controller-manager signs such a request once it is
approved but never approves one, so the ``supercluster-csr-approver`` unit
(``machine/control_plane/csr_approver.py``) does, only for a Node's own registered addresses; the apiserver
then checks every kubelet it calls against the cluster CA (``--kubelet-certificate-authority``), and so does
Prometheus. The unit is in the cloud-init every apiserver shares; every copy may decide a request, and the
apiserver accepts one approval per resourceVersion. Its client certificate (CN ``pki.CSR_APPROVER_USER``) is
issued by the program like the other components' and fetched from Key Vault at boot; its RBAC is
``infra.control_plane.cluster_objects.csr_approver_rbac``.
"""

from __future__ import annotations

import json

import machine
from infra.boot import systemd
from infra.boot.cloudinit import CloudConfig
from infra.boot.secrets import FETCH_UNIT
from infra.control_plane import paths, pki
from infra.facts.endpoints import LOCAL_APISERVER

SCRIPT = "/usr/local/sbin/supercluster-csr-approver"
CONFIG = f"{paths.KUBERNETES_DIR}/csr-approver.json"
UNIT = "supercluster-csr-approver.service"
# The signer of kubelet serving certificates (kubernetes.io "Certificate Signing Requests", built-in signers).
KUBELET_SERVING_SIGNER = "kubernetes.io/kubelet-serving"


def approver_config() -> str:
    """The program's settings: the VM's own apiserver (loopback, as the controller-manager's), the CA and its
    credential's paths, the one signer it approves for. No secret (the key is a path)."""
    document = {
        "server": LOCAL_APISERVER,
        "ca_cert": pki.cert_path(pki.CLUSTER_CA),
        "cert": pki.cert_path(pki.CSR_APPROVER),
        "key": pki.key_path(pki.CSR_APPROVER),
        "signer": KUBELET_SERVING_SIGNER,
    }
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def add_approver_unit(cloud: CloudConfig) -> None:
    """The program, its settings and its long-running unit, started once its credential is fetched; it waits
    for the local apiserver itself (it retries every few seconds)."""
    cloud.add(SCRIPT, machine.source("control_plane/csr_approver.py"), permissions="0755")
    cloud.add(CONFIG, approver_config(), permissions="0644")
    cloud.add(
        f"/etc/systemd/system/{UNIT}",
        systemd.unit(
            "Approve kubelet serving certificates for each Node's own addresses",
            [SCRIPT, CONFIG],
            after=["network-online.target", FETCH_UNIT, paths.APISERVER_UNIT],
            wants=["network-online.target", FETCH_UNIT],
            service={
                "Restart": "always",
                "RestartSec": "10",
                # It reads its files and talks HTTPS; it writes nothing.
                "NoNewPrivileges": "yes",
                "ProtectSystem": "strict",
                "ProtectHome": "yes",
                "PrivateTmp": "yes",
            },
        ),
        permissions="0644",
    )
