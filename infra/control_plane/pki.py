"""The cluster PKI: which certificates exist, who signs them, and how each reaches an apiserver VM.

Two CAs, as Kubernetes expects (kubernetes.io "PKI certificates and requirements"): the cluster
CA signs every client and serving certificate and, through kube-controller-manager, the kubelets'
client certificates; the front-proxy CA signs only the aggregation layer's client certificate, so
a front-proxy certificate can never authenticate as a user. Keys are ECDSA P-256.

Every private key and certificate the program issues travels as a Key Vault secret (written by the
control-plane component, fetched at boot by ``infra.boot.secrets``); customData only names them. The
apiserver's serving certificate is the exception: each machine issues its own at boot, for its own
address, with the cluster CA key it fetches (``infra.control_plane.machine_identity``). Only the apiserver
identity reads them, except the cluster CA certificate, which nodes and NAT hosts read to join.
"""

from __future__ import annotations

from dataclasses import dataclass

from infra.boot import secret_names
from infra.boot.secrets import SecretFile
from infra.control_plane import paths

KEY_ALGORITHM = "ECDSA"
KEY_CURVE = "P256"
# kubeadm's defaults (kubernetes.io "Certificate Management with kubeadm"): CAs for 10 years,
# leaf certificates for 1 year. pulumi-tls re-issues a leaf certificate on the first `pulumi up`
# inside the renewal window; the new one reaches each VM through the rolling refresh
# (components/control_plane.py) one apiserver at a time.
CA_VALIDITY_HOURS = 10 * 365 * 24
LEAF_VALIDITY_HOURS = 365 * 24
LEAF_EARLY_RENEWAL_HOURS = 90 * 24

CLUSTER_CA = "cluster-ca"
FRONT_PROXY_CA = "front-proxy-ca"
CA_COMMON_NAMES = {CLUSTER_CA: "kubernetes-ca", FRONT_PROXY_CA: "front-proxy-ca"}
CA_USAGES = ("cert_signing", "crl_signing", "digital_signature", "key_encipherment")
SERVER_USAGES = ("digital_signature", "key_encipherment", "server_auth")
CLIENT_USAGES = ("digital_signature", "key_encipherment", "client_auth")

APISERVER = "apiserver"  # the serving certificate: issued on the machine, named here for its files
KUBELET_CLIENT = "apiserver-kubelet-client"
FRONT_PROXY_CLIENT = "front-proxy-client"
CONTROLLER_MANAGER = "controller-manager"
SCHEDULER = "scheduler"
CSR_APPROVER = "csr-approver"
TOKEN_MINTER = "token-minter"

# Identities the apiserver knows these certificates by (subject CN / O).
KUBELET_CLIENT_USER = "kube-apiserver-kubelet-client"
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"
SCHEDULER_USER = "system:kube-scheduler"
# The kubelet-serving CSR approver on every apiserver VM (infra/control_plane/csr_approval.py): its RBAC is its own.
CSR_APPROVER_USER = "supercluster:csr-approver"
# The nodes' bootstrap-token minter on every apiserver VM (infra/control_plane/token_minting.py), in no group.
TOKEN_MINTER_USER = "supercluster:bootstrap-token-minter"
# The group that bypasses authorization: how the deploy creates the very first RBAC bindings, before any
# binding could grant it anything. No certificate of it is issued here or kept anywhere: the deploy and a
# break-glass operator mint one for hours on an apiserver VM (infra/control_plane/access.py).
SUPERUSER_GROUP = "system:masters"


@dataclass(frozen=True)
class CertificateSpec:
    key: str  # names the Pulumi resources, the Key Vault secrets and the files
    common_name: str
    signer: str = CLUSTER_CA
    organization: str | None = None  # subject O: the group the apiserver puts the user in
    server: bool = False
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()
    validity_hours: int = LEAF_VALIDITY_HOURS
    early_renewal_hours: int = LEAF_EARLY_RENEWAL_HOURS

    @property
    def usages(self) -> tuple[str, ...]:
        return SERVER_USAGES if self.server else CLIENT_USAGES


def certificates() -> tuple[CertificateSpec, ...]:
    """The leaf certificates the program issues. The apiserver's serving certificate is not among them:
    each apiserver machine issues its own at boot for its own address (``infra.control_plane.machine_identity``)."""
    return (
        CertificateSpec(KUBELET_CLIENT, KUBELET_CLIENT_USER),
        CertificateSpec(FRONT_PROXY_CLIENT, "front-proxy-client", signer=FRONT_PROXY_CA),
        CertificateSpec(CONTROLLER_MANAGER, CONTROLLER_MANAGER_USER),
        CertificateSpec(SCHEDULER, SCHEDULER_USER),
        CertificateSpec(CSR_APPROVER, CSR_APPROVER_USER),
        CertificateSpec(TOKEN_MINTER, TOKEN_MINTER_USER),
    )


# ---------------------------------------------------------------- secrets and files


def cert_secret(key: str) -> str:
    return secret_names.CLUSTER_CA_CERT if key == CLUSTER_CA else f"{key}-crt"


def key_secret(key: str) -> str:
    return f"{key}-key"


def cert_path(key: str) -> str:
    return f"{paths.PKI_DIR}/{_file_stem(key)}.crt"


def key_path(key: str) -> str:
    return f"{paths.PKI_DIR}/{_file_stem(key)}.key"


def _file_stem(key: str) -> str:
    return "ca" if key == CLUSTER_CA else key


SERVICE_ACCOUNT_KEY_SECRET = "service-account-key"
SERVICE_ACCOUNT_PUB_SECRET = "service-account-pub"
SERVICE_ACCOUNT_KEY = f"{paths.PKI_DIR}/sa.key"
SERVICE_ACCOUNT_PUB = f"{paths.PKI_DIR}/sa.pub"
ENCRYPTION_CONFIG_SECRET = "apiserver-encryption-config"


def apiserver_secret_files(specs: tuple[CertificateSpec, ...]) -> tuple[SecretFile, ...]:
    """Every secret an apiserver VM fetches at boot and where it lands. Certificates are 0644 and keys
    0600 (CIS 1.1.20 / 1.1.21); the etcd client files come from the etcd clusters' PKI."""
    files = [
        SecretFile(cert_secret(CLUSTER_CA), cert_path(CLUSTER_CA), "0644"),
        # kube-controller-manager signs kubelet client certificates with it (CSR signer).
        SecretFile(key_secret(CLUSTER_CA), key_path(CLUSTER_CA), "0600"),
        SecretFile(cert_secret(FRONT_PROXY_CA), cert_path(FRONT_PROXY_CA), "0644"),
        SecretFile(SERVICE_ACCOUNT_KEY_SECRET, SERVICE_ACCOUNT_KEY, "0600"),
        SecretFile(SERVICE_ACCOUNT_PUB_SECRET, SERVICE_ACCOUNT_PUB, "0644"),
        SecretFile(ENCRYPTION_CONFIG_SECRET, paths.ENCRYPTION_CONFIG, "0600"),
        *secret_names.APISERVER_ETCD_CLIENT_FILES,
    ]
    for spec in specs:
        files.append(SecretFile(cert_secret(spec.key), cert_path(spec.key), "0644"))
        files.append(SecretFile(key_secret(spec.key), key_path(spec.key), "0600"))
    return tuple(files)
