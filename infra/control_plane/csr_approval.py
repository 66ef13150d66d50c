"""Who approves a node's certificates: a program on every apiserver VM, with its own narrow RBAC.

Two kinds of request reach it (``machine/control_plane/csr_approver.py``):

- a kubelet's serving certificate (``serverTLSBootstrap``, infra/node/kubelet.py), a
  ``kubernetes.io/kubelet-serving`` CSR that kube-controller-manager signs once approved but never approves:
  approved only for the Node's own registered addresses; the apiserver then checks every kubelet it calls
  against the cluster CA (``--kubelet-certificate-authority``), and so does Prometheus;
- a new node's client certificate, the ``kubernetes.io/kube-apiserver-client-kubelet`` CSR its boot program
  sends with the bootstrap token (infra/node/join.py): approved only when Azure's attested document, bound to
  the request's key, and Azure Resource Manager's record of the VM the request names say it is the machine of
  that name, of a scale set or NAT host this program renders. Nothing else approves those (the bootstrap token
  is not granted ``nodeclient``: infra/control_plane/cluster_objects.py).

The unit is in the cloud-init every apiserver shares; every copy may decide a request, and the apiserver accepts
one approval per resourceVersion. Its client certificate (CN ``pki.CSR_APPROVER_USER``) is issued by the program
like the other components' and fetched from Key Vault at boot; its RBAC is
``infra.control_plane.cluster_objects.csr_approver_rbac``. It reads Azure as the apiserver's identity
(``supercluster-imds-token``), which may read the node resource group and the NAT hosts (components/identities.py).
"""

from __future__ import annotations

import json
from typing import Any

import machine
from infra.boot import systemd
from infra.boot.cloudinit import CloudConfig
from infra.boot.secrets import FETCH_UNIT, IMDS_TOKEN_SCRIPT
from infra.config import naming
from infra.config.cluster_config import ClusterConfig
from infra.config.sizing import shards
from infra.control_plane import paths, pki
from infra.facts import attestation
from infra.facts.endpoints import LOCAL_APISERVER
from infra.node import cni

SCRIPT = "/usr/local/sbin/supercluster-csr-approver"
CONFIG = f"{paths.KUBERNETES_DIR}/csr-approver.json"
UNIT = "supercluster-csr-approver.service"
# The signer of kubelet serving certificates (kubernetes.io "Certificate Signing Requests", built-in signers).
KUBELET_SERVING_SIGNER = "kubernetes.io/kubelet-serving"


def rendered_machines(config: ClusterConfig) -> dict[str, Any]:
    """The VMs a node certificate may be issued to: every shard's scale set (``<resource group>/<name>``, lower
    case, to its computer-name prefix; retired pools too, their nodes may still run) and every NAT host."""
    nodes = naming.node_resource_group(config.cluster_name)
    return {
        "scale_sets": {
            f"{nodes}/{naming.scale_set(config.cluster_name, shard.name)}".lower(): naming.computer_name_prefix(
                shard.name
            )
            for pool in config.node_pools
            for shard in shards(pool)
        },
        "vms": sorted(
            f"{naming.resource_group(config.cluster_name)}/{naming.nat_host(config.cluster_name, index)}".lower()
            for index in range(config.network.nat_hosts.count)
        ),
    }


def approver_config(config: ClusterConfig) -> str:
    """The program's settings: the VM's own apiserver (loopback, as the controller-manager's), the CA and its
    credential's paths, its two signers, what a join must carry and where Azure is asked. No secret."""
    document = {
        "server": LOCAL_APISERVER,
        "ca_cert": pki.cert_path(pki.CLUSTER_CA),
        "cert": pki.cert_path(pki.CSR_APPROVER),
        "key": pki.key_path(pki.CSR_APPROVER),
        "signer": KUBELET_SERVING_SIGNER,
        "client_signer": attestation.KUBELET_CLIENT_SIGNER,
        "bootstrap_group": attestation.BOOTSTRAP_GROUP,
        "document_annotation": attestation.DOCUMENT_ANNOTATION,
        "vm_annotation": attestation.VM_ANNOTATION,
        "nonce_length": attestation.NONCE_LENGTH,
        "attestation_roots": attestation.SYSTEM_ROOTS,
        "attestation_signer": attestation.ATTESTATION_SIGNER,
        "imds": f"http://{cni.IMDS_IP}:{cni.IMDS_PORT}",
        "compute_path": attestation.COMPUTE_PATH,
        "compute_api_version": attestation.COMPUTE_API_VERSION,
        "arm_endpoint": attestation.ARM_ENDPOINT,
        "arm_api_version": attestation.ARM_API_VERSION,
        "arm_ca_file": None,  # the machine's root store
        "token_command": [IMDS_TOKEN_SCRIPT, attestation.ARM_ENDPOINT + "/"],
        "machines": rendered_machines(config),
    }
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def add_approver_unit(cloud: CloudConfig, config: ClusterConfig) -> None:
    """The program, its settings and its long-running unit, started once its credential is fetched; it waits
    for the local apiserver itself (it retries every few seconds)."""
    # Compressed: the apiservers' customData is near Azure's limit (infra/boot/cloudinit.py).
    cloud.add(SCRIPT, machine.source("control_plane/csr_approver.py"), permissions="0755", compressed=True)
    cloud.add(CONFIG, approver_config(config), permissions="0644")
    cloud.add(
        f"/etc/systemd/system/{UNIT}",
        systemd.unit(
            "Approve node certificates: serving ones for each Node's addresses, client ones for attested VMs",
            [SCRIPT, CONFIG],
            after=["network-online.target", FETCH_UNIT, paths.APISERVER_UNIT],
            wants=["network-online.target", FETCH_UNIT],
            service={
                "Restart": "always",
                "RestartSec": "10",
                # It reads its files and talks HTTPS; it writes nothing but temporary files.
                "NoNewPrivileges": "yes",
                "ProtectSystem": "strict",
                "ProtectHome": "yes",
                "PrivateTmp": "yes",
            },
        ),
        permissions="0644",
    )
