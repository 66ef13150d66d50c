"""What the etcd CAs issue, as plain profiles the component turns into pulumi-tls resources.

Three CAs, none of them the cluster CA (CIS Kubernetes Benchmark 2.7: "a unique Certificate Authority
is used for etcd"): one per etcd cluster, which signs its members' server and peer certificates, and one
for the kube-apiserver's client certificate. kube-apiserver has a single etcd TLS identity for every
server it names (``--etcd-certfile`` serves ``--etcd-servers-overrides`` too), so the client CA is
trusted on the client port of both clusters and on no peer port; each cluster's peer port trusts only
its own CA. A certificate of one cluster therefore opens nothing of the other, whatever the network
lets through, and the apiserver's certificate cannot join either cluster as a peer. Every member has a
server certificate (client port) and a peer certificate (peer port), each naming the member's IP.
"""

from __future__ import annotations

from dataclasses import dataclass

from infra.boot.secret_names import ETCD_PKI_DIR, etcd_ca_cert, etcd_client_cas
from infra.boot.secrets import SecretFile
from infra.etcd.spec import EtcdClusterSpec, EtcdMember

KEY_ALGORITHM = "ECDSA"
KEY_CURVE = "P256"
# The CA outlives every leaf; replacing it means re-issuing everything, so it is long-lived and
# its resources are protected. Leaves are re-issued by `pulumi up` once they are within
# LEAF_EARLY_RENEWAL_HOURS of expiry, then reach members at their next secret fetch
# (docs/runbooks/rotate-certificates.md).
CA_VALIDITY_HOURS = 10 * 365 * 24
LEAF_VALIDITY_HOURS = 2 * 365 * 24
LEAF_EARLY_RENEWAL_HOURS = 60 * 24

SERVER_USES = ("digital_signature", "key_encipherment", "server_auth", "client_auth")
PEER_USES = ("digital_signature", "key_encipherment", "server_auth", "client_auth")
CLIENT_USES = ("digital_signature", "key_encipherment", "client_auth")
CA_USES = ("cert_signing", "crl_signing", "digital_signature")

APISERVER_CLIENT_CN = "kube-apiserver-etcd-client"

CA_FILE = f"{ETCD_PKI_DIR}/ca.crt"  # this cluster's CA: the peer port's trust
CLIENT_CAS_FILE = f"{ETCD_PKI_DIR}/client-cas.crt"  # this cluster's CA and the apiserver's client CA
SERVER_CERT_FILE = f"{ETCD_PKI_DIR}/server.crt"
SERVER_KEY_FILE = f"{ETCD_PKI_DIR}/server.key"
PEER_CERT_FILE = f"{ETCD_PKI_DIR}/peer.crt"
PEER_KEY_FILE = f"{ETCD_PKI_DIR}/peer.key"


@dataclass(frozen=True)
class CertProfile:
    common_name: str
    allowed_uses: tuple[str, ...]
    validity_hours: int = LEAF_VALIDITY_HOURS
    early_renewal_hours: int = LEAF_EARLY_RENEWAL_HOURS
    organization: str = "supercluster"
    ip_addresses: tuple[str, ...] = ()
    dns_names: tuple[str, ...] = ()


def ca_profile(cluster_name: str, role: str) -> CertProfile:
    """The CA of the etcd cluster ``role``; the main cluster's keeps the name the one shared CA had."""
    return _ca(f"{cluster_name} {role} CA")


def client_ca_profile(cluster_name: str) -> CertProfile:
    """The CA of the apiserver's client certificate, the only client of both clusters."""
    return _ca(f"{cluster_name} etcd client CA")


def _ca(common_name: str) -> CertProfile:
    return CertProfile(
        common_name=common_name,
        allowed_uses=CA_USES,
        validity_hours=CA_VALIDITY_HOURS,
        early_renewal_hours=0,
    )


def server_profile(member: EtcdMember) -> CertProfile:
    """Serves the client port; also the member's own client identity (backups, rejoin)."""
    return CertProfile(
        common_name=member.name, allowed_uses=SERVER_USES, ip_addresses=(member.ip,), dns_names=(member.name,)
    )


def peer_profile(member: EtcdMember) -> CertProfile:
    """Serves the peer port and identifies the member to its peers (both ends authenticate)."""
    return CertProfile(
        common_name=member.name, allowed_uses=PEER_USES, ip_addresses=(member.ip,), dns_names=(member.name,)
    )


def apiserver_client_profile() -> CertProfile:
    return CertProfile(common_name=APISERVER_CLIENT_CN, allowed_uses=CLIENT_USES)


# Each member's own certificates and keys, in Key Vault under these names.
MEMBER_FILES = {
    ("server", "crt"): (SERVER_CERT_FILE, "0644"),
    ("server", "key"): (SERVER_KEY_FILE, "0600"),
    ("peer", "crt"): (PEER_CERT_FILE, "0644"),
    ("peer", "key"): (PEER_KEY_FILE, "0600"),
}


def member_secret_name(member: EtcdMember, kind: str, part: str) -> str:
    """e.g. ``prod-etcd-0-server-key``; Key Vault names allow letters, digits and '-'."""
    return f"{member.name}-{kind}-{part}"


def bundle(*pems: str) -> str:
    """Certificates one after the other in one PEM file, as etcd's and the apiserver's CA files take them."""
    return "".join(pem if pem.endswith("\n") else pem + "\n" for pem in pems)


def member_secret_files(cluster: EtcdClusterSpec, member: EtcdMember) -> tuple[SecretFile, ...]:
    """What the member fetches from Key Vault at every boot, before etcd starts."""
    files = [
        SecretFile(etcd_ca_cert(cluster.role), CA_FILE, "0644"),
        SecretFile(etcd_client_cas(cluster.role), CLIENT_CAS_FILE, "0644"),
    ]
    for (kind, part), (path, mode) in MEMBER_FILES.items():
        files.append(SecretFile(member_secret_name(member, kind, part), path, mode))
    return tuple(files)
