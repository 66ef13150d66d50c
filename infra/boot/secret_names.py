"""Key Vault secret names shared between roles, and where each lands on a machine.

A secret is written by the component that creates it (etcd PKI by the etcd
clusters, cluster PKI and the bootstrap token by the control plane) and read, by
name, by the machines of another role. Keeping the names here is what lets the
components be built independently.
"""

from __future__ import annotations

from infra.boot.secrets import SecretFile

# etcd PKI (infra/etcd/certificates.py): each etcd cluster has a CA of its own, and the apiserver's client
# certificate comes from a third. The apiserver verifies both clusters' members with the bundle of their CAs.
APISERVER_ETCD_CAS = "apiserver-etcd-cas-crt"
APISERVER_ETCD_CLIENT_CERT = "apiserver-etcd-client-crt"
APISERVER_ETCD_CLIENT_KEY = "apiserver-etcd-client-key"


def etcd_ca_cert(role: str) -> str:
    """The CA of the etcd cluster ``role`` (``etcd``, ``events-etcd``): what its peer port trusts."""
    return f"{role}-ca-crt"


def etcd_client_cas(role: str) -> str:
    """What the client port of the etcd cluster ``role`` trusts: its own CA and the apiserver's client CA."""
    return f"{role}-client-cas-crt"


# Cluster PKI and node join, read by every node (and NAT host, which joins as a tainted node).
CLUSTER_CA_CERT = "cluster-ca-crt"
NODE_BOOTSTRAP_TOKEN = "node-bootstrap-token"

ETCD_PKI_DIR = "/etc/etcd/pki"
KUBERNETES_PKI_DIR = "/etc/kubernetes/pki"

APISERVER_ETCD_CLIENT_FILES = (
    SecretFile(APISERVER_ETCD_CAS, f"{KUBERNETES_PKI_DIR}/etcd/ca.crt", "0644"),
    SecretFile(APISERVER_ETCD_CLIENT_CERT, f"{KUBERNETES_PKI_DIR}/apiserver-etcd-client.crt", "0644"),
    SecretFile(APISERVER_ETCD_CLIENT_KEY, f"{KUBERNETES_PKI_DIR}/apiserver-etcd-client.key", "0600"),
)
NODE_JOIN_FILES = (
    SecretFile(CLUSTER_CA_CERT, f"{KUBERNETES_PKI_DIR}/ca.crt", "0644"),
    SecretFile(NODE_BOOTSTRAP_TOKEN, "/etc/kubernetes/bootstrap-token", "0600"),
)
