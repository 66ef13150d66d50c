"""The node's client certificate, asked for by its own boot program with Azure's proof of the machine.

``supercluster-node-join`` (``machine/node/node_join.py``) runs before kubelet at every boot: it makes the
node's ``kubernetes.io/kube-apiserver-client-kubelet`` CSR with the bootstrap token, carrying the instance
metadata service's attested document (its nonce bound to the request's key) and the VM's resource ID
(``infra.facts.attestation``), waits for the certificate and writes it where kubelet keeps its own, with
kubelet's kubeconfig. kubelet, which requires the unit, then starts with a valid client certificate and
rotates it as the node. Why not kubelet's own bootstrap: the pinned kubelet cannot attach anything to its CSR.
"""

from __future__ import annotations

import json

from infra.boot import yaml_text
from infra.boot.cloudinit import CloudConfig
from infra.boot.secrets import FETCH_RETRIES, FETCH_RETRY_DELAY_SECONDS, FETCH_SCRIPT_PATH, add_boot_program
from infra.facts import attestation
from infra.node import cni, kubelet

SCRIPT = "/usr/local/sbin/supercluster-node-join"
CONFIG = "/etc/kubernetes/node-join.json"
UNIT = kubelet.JOIN_UNIT
# A refused token is read from Key Vault again at most this often: the fetch is an IMDS token and a read of each
# of the node's secrets, and a pool's worth of nodes may be waiting at once.
REFETCH_SECONDS = 300
# A re-read is stopped after this long and the program asks again: the fetch gives one unreadable secret about a
# minute (its curl's retries, secrets.FETCH_RETRIES at secrets.FETCH_RETRY_DELAY_SECONDS apart), and a read that
# stops answering would wait forever (curl is given no --max-time). Twice the retries, well within REFETCH_SECONDS.
REFETCH_TIMEOUT_SECONDS = 2 * FETCH_RETRIES * FETCH_RETRY_DELAY_SECONDS


def join_config(server: str) -> str:
    """Everything the program needs; no secret (the token is a path)."""
    cert_dir, current = kubelet.CLIENT_CERT.rsplit("/", 1)
    document = {
        "server": server,
        "ca_cert": kubelet.CA_PATH,
        "token_file": kubelet.TOKEN_PATH,
        # The boot's own fetch (every secret of the node's, the token among them), run again on a refused token.
        "refetch_command": [FETCH_SCRIPT_PATH],
        "refetch_seconds": REFETCH_SECONDS,
        "refetch_timeout_seconds": REFETCH_TIMEOUT_SECONDS,
        "cert_dir": cert_dir,
        "current_name": current,
        "kubeconfig": kubelet.KUBECONFIG,
        "kubeconfig_text": yaml_text.dump(kubelet.node_kubeconfig(server), sort_keys=False),
        "signer": attestation.KUBELET_CLIENT_SIGNER,
        "user_prefix": attestation.NODE_USER_PREFIX,
        "group": attestation.NODES_GROUP,
        "imds": f"http://{cni.IMDS_IP}:{cni.IMDS_PORT}",
        "attested_path": attestation.ATTESTED_PATH,
        "attested_api_version": attestation.ATTESTED_API_VERSION,
        "nonce_length": attestation.NONCE_LENGTH,
        "compute_path": attestation.COMPUTE_PATH,
        "compute_api_version": attestation.COMPUTE_API_VERSION,
        "document_annotation": attestation.DOCUMENT_ANNOTATION,
        "vm_annotation": attestation.VM_ANNOTATION,
    }
    return json.dumps(document, sort_keys=True) + "\n"


def add_node_join(cloud: CloudConfig, server: str) -> None:
    """The program, its settings and its oneshot unit, after the token and CA are fetched; kubelet requires it
    (``kubelet.unit``)."""
    add_boot_program(
        cloud,
        unit=UNIT,
        description="Ask for the node's client certificate with Azure's attested proof of this machine",
        script=SCRIPT,
        source="node/node_join.py",
        config=CONFIG,
        settings=join_config(server),
        service={"Type": "oneshot", "RemainAfterExit": "yes", "Restart": "no"},  # it retries in its own loop
        compress_program=True,
        compress_settings=True,
    )
