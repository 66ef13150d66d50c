"""Who approves a node's certificates: a program on every apiserver VM, with its own narrow RBAC.

Three kinds of request reach it (``machine/control_plane/csr_approver.py``):

- a kubelet's serving certificate (``serverTLSBootstrap``, infra/node/kubelet.py), a
  ``kubernetes.io/kubelet-serving`` CSR that kube-controller-manager signs once approved but never approves:
  approved only for what Azure says of the VM the Node's ``spec.providerID`` names (one of this cluster's that may
  be a node, with the Node's name as its computer name): that name, and the private addresses of its NICs' primary
  IP configurations (not its pods', the secondary ones), never the addresses the Node reports; the apiserver then
  checks every kubelet it calls against the cluster CA (``--kubelet-certificate-authority``), and so does
  Prometheus;
- a new node's client certificate, the ``kubernetes.io/kube-apiserver-client-kubelet`` CSR its boot program
  sends with the bootstrap token (infra/node/join.py): approved only when Azure's attested document, bound to
  the request's key, and Azure Resource Manager's record of the VM the request names say it is the machine of
  that name, of a node pool's scale set or a NAT host of this cluster (recognised by the names the program gives
  them: ``node_machines``). Nothing else approves those (the bootstrap token
  is not granted ``nodeclient``: infra/control_plane/cluster_objects.py);
- a node's renewal of its client certificate, the same signer's CSR sent as the node itself: approved only for
  its own name while Azure still has the VM its Node's providerID names, under that name (no one is granted
  ``selfnodeclient``, so the controller-manager approves none).

The unit is in the cloud-init every apiserver shares; the copy holding the approvers' Lease (``LEASE``) decides,
the others stand by (``lease_settings``), and the apiserver accepts one approval per resourceVersion should two
decide at once. Its client certificate (CN ``pki.CSR_APPROVER_USER``) is issued by the program
like the other components' and fetched from Key Vault at boot; its RBAC is
``infra.control_plane.cluster_objects.csr_approver_rbac``. It reads Azure as the apiserver's identity
(``supercluster-imds-token``), which may read the node resource group and the NAT hosts and their NICs
(components/identities.py).
What it reaches outside the cluster, at run time only and never at boot: ``attestation.RUN_TIME_HOSTS``
(Resource Manager, Microsoft's certificate hosts; docs/security.md, "What the approver reaches").
"""

from __future__ import annotations

import json

from infra.addons.shared_names import SYSTEM_NAMESPACE
from infra.boot import systemd
from infra.boot.cloudinit import CloudConfig
from infra.boot.secrets import IMDS_TOKEN_SCRIPT, add_boot_program
from infra.config import naming
from infra.config.cluster_config import ClusterConfig
from infra.control_plane import leader_election, paths, pki
from infra.facts import attestation
from infra.facts.endpoints import LOCAL_APISERVER
from infra.node import cni

SCRIPT = "/usr/local/sbin/supercluster-csr-approver"
CONFIG = f"{paths.KUBERNETES_DIR}/csr-approver.json"
UNIT = "supercluster-csr-approver.service"
# The signer of kubelet serving certificates (kubernetes.io "Certificate Signing Requests", built-in signers).
KUBELET_SERVING_SIGNER = "kubernetes.io/kubelet-serving"
# Where it keeps the intermediate certificates it fetched: the unit's StateDirectory (systemd.exec(5): created
# under /var/lib and writable though the rest of the file system is read-only to it).
STATE_DIRECTORY = "supercluster-csr-approver"
INTERMEDIATE_CACHE = f"/var/lib/{STATE_DIRECTORY}"
# The Lease whose holder is the one copy that decides (``lease_settings``). Declared with the cluster's objects
# (``cluster_objects.csr_approver_lease``), so the approvers need no right to create one.
LEASE = "supercluster-csr-approver"
LEASE_NAMESPACE = SYSTEM_NAMESPACE


def lease_settings() -> dict[str, object]:
    """One copy decides at a time: every copy would otherwise make the same Resource Manager reads for each
    request. A joining node costs three (its VM for the client request; its VM and NIC list for the serving one),
    and Resource Manager refills a principal's reads in a subscription at 25 a second from a bucket of 250 (Azure
    Resource Manager documentation, "Request limits and throttling", the 2024 token-bucket limits): 1,000 joins
    take two minutes of the apiservers' identity's reads from one copy, ten from five. The timings are the
    controller-manager's and the scheduler's (``leader_election``), so an etcd election does not make the holder
    give up its claim."""
    return {
        "namespace": LEASE_NAMESPACE,
        "name": LEASE,
        "duration_seconds": leader_election.LEASE_DURATION_S,
        "renew_deadline_seconds": leader_election.RENEW_DEADLINE_S,
        "retry_seconds": leader_election.RETRY_PERIOD_S,
    }


def node_machines(config: ClusterConfig) -> dict[str, str]:
    """The VMs a node certificate may be issued to, by the names the program gives them rather than by a list:
    an instance of a scale set of the node resource group whose name has the node pools' prefix (the rest of the
    name is its instances' computer-name prefix), or a VM of the cluster's group with the NAT hosts' prefix. So
    adding or removing a pool, or a NAT host, leaves every apiserver's model as it is."""
    return {
        "scale_set_group": naming.node_resource_group(config.cluster_name),
        "scale_set_prefix": naming.node_scale_set_prefix(config.cluster_name),
        "vm_group": naming.resource_group(config.cluster_name),
        "vm_prefix": naming.nat_host_prefix(config.cluster_name),
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
        "network_api_version": attestation.NETWORK_API_VERSION,
        "arm_ca_file": None,  # the machine's root store
        "token_command": [IMDS_TOKEN_SCRIPT, attestation.ARM_ENDPOINT + "/"],
        "intermediate_hosts": list(attestation.INTERMEDIATE_HOSTS),
        "intermediate_cache": INTERMEDIATE_CACHE,
        "machines": node_machines(config),
        "lease": lease_settings(),
    }
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def add_approver_unit(cloud: CloudConfig, config: ClusterConfig) -> None:
    """The program, its settings and its long-running unit, started once its credential is fetched; it waits
    for the local apiserver itself (it retries every few seconds)."""
    add_boot_program(
        cloud,
        unit=UNIT,
        description="Approve node certificates: serving ones for Azure's addresses, client ones for attested VMs",
        script=SCRIPT,
        source="control_plane/csr_approver.py",
        config=CONFIG,
        settings=approver_config(config),
        after=(paths.APISERVER_UNIT,),
        service={
            "Restart": "always",
            "RestartSec": "10",
            # It reads its files and talks HTTPS; it writes temporary files and its cache of intermediates.
            **systemd.NETWORK_CLIENT_SANDBOX,
            "StateDirectory": STATE_DIRECTORY,
        },
        compress_program=True,
    )
