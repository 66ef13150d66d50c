"""A test PKI issued from the project's own certificate specs: what Key Vault would hold.

The components issue every certificate with pulumi-tls from ``infra.control_plane.pki`` (cluster
and front-proxy CAs, apiserver, controller-manager, scheduler, kubelet-client, admin) and
``infra.etcd.certificates`` (each etcd cluster's CA and its members' server and peer certificates,
the apiserver's etcd client CA and certificate), and store them in Key Vault under the names those
modules give. This module issues the same certificates (subject CN and O, SANs, key usages, ECDSA
P-256, validity) with ``cryptography``, and returns them as the vault the machines' rendered fetch
scripts read from:
``{secret name: value}``. The harness then checks that every secret a machine fetches exists
here and every Key Vault secret the plan declares is issued here, so a renamed secret fails.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import secrets
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from infra.addons.monitoring import alertmanager, credential
from infra.boot import secret_names
from infra.control_plane import apiserver, token_minting
from infra.control_plane import pki as cluster_pki
from infra.etcd import certificates as etcd_pki
from infra.etcd.spec import EtcdMember
from tests.helpers import bcrypt_hash

# pulumi-tls's allowed_uses, as X.509 key usages and extended key usages.
_KEY_USAGES = {"digital_signature", "key_encipherment", "cert_signing", "crl_signing"}
_EXTENDED = {"server_auth": ExtendedKeyUsageOID.SERVER_AUTH, "client_auth": ExtendedKeyUsageOID.CLIENT_AUTH}


@dataclass(frozen=True)
class Issued:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @property
    def cert_pem(self) -> str:
        return self.cert.public_bytes(serialization.Encoding.PEM).decode()

    @property
    def key_pem(self) -> str:
        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode()


def _name(common_name: str, organization: str | None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization)] if organization else []
    return x509.Name([*parts, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def issue(
    common_name: str,
    *,
    uses: tuple[str, ...],
    hours: int,
    organization: str | None = None,
    dns_names: tuple[str, ...] = (),
    ip_addresses: tuple[str, ...] = (),
    ca: Issued | None = None,
) -> Issued:
    """One certificate as pulumi-tls makes it: self-signed CA when ``ca`` is None, else signed by ``ca``."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    subject = _name(common_name, organization)
    usage = {u: u in uses for u in _KEY_USAGES}
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca.cert.subject if ca else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(hours=hours))
        .add_extension(x509.BasicConstraints(ca=ca is None, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=usage["digital_signature"],
                content_commitment=False,
                key_encipherment=usage["key_encipherment"],
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=usage["cert_signing"],
                crl_sign=usage["crl_signing"],
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )
    extended = [_EXTENDED[u] for u in uses if u in _EXTENDED]
    if extended:
        builder = builder.add_extension(x509.ExtendedKeyUsage(extended), critical=False)
    sans = [x509.DNSName(n) for n in dns_names] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ip_addresses]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    signer = ca.key if ca else key
    return Issued(key, builder.sign(signer, hashes.SHA256()))


@dataclass
class TestPki:
    """Everything the components would put in Key Vault, plus the admin kubeconfig's identity."""

    vault: dict[str, str]
    cluster_ca: Issued
    admin: Issued
    bootstrap_token: str  # "<id>.<secret>"
    # The monitoring stack's credential (infra/addons/monitoring/credential.py), which the deploy makes.
    monitoring_password: str = field(default_factory=lambda: secrets.token_hex(16))
    # The Alertmanager gossip mesh's Secret (alertmanager.cluster_tls_data), which the deploy makes too.
    alertmanager_mesh_data: dict[str, str] = field(default_factory=lambda: alertmanager_mesh())

    @property
    def bootstrap_token_id(self) -> str:
        return self.bootstrap_token.split(".", 1)[0]

    def bootstrap_token_data(self) -> dict[str, str]:
        """The bootstrap-token Secret's ``stringData``, which the plan masks."""
        token_id, token_secret = self.bootstrap_token.split(".", 1)
        expires = token_minting.first_token_expiration(datetime.datetime.now(datetime.UTC))
        return token_minting.bootstrap_token_data(token_id, token_secret, expires)

    def monitoring_access_data(self, rotation: int) -> dict[str, str]:
        """The monitoring credential Secret's ``stringData`` for the passwords' generation ``rotation``, which the plan
        masks (hashed by libcrypt here, by the random provider in a deploy)."""
        return credential.secret_data(
            self.monitoring_password, bcrypt_hash(self.monitoring_password), secrets.token_hex(16), rotation
        )


def alertmanager_mesh(ca: Issued | None = None) -> dict[str, str]:
    """The Alertmanager mesh's files as components/monitoring_access.py issues them: a CA of the mesh's own (or
    ``ca``) and one certificate for the replicas' name, for server and client auth."""
    ca = ca or issue(f"{alertmanager.CLUSTER_SERVER_NAME}-ca", uses=cluster_pki.CA_USAGES, hours=24)
    leaf = issue(
        alertmanager.CLUSTER_SERVER_NAME,
        uses=cluster_pki.SERVER_USAGES + cluster_pki.CLIENT_USAGES,
        hours=24,
        dns_names=(alertmanager.CLUSTER_SERVER_NAME,),
        ca=ca,
    )
    return alertmanager.cluster_tls_data(ca.cert_pem, leaf.cert_pem, leaf.key_pem)


def issue_pki(
    cluster_name: str,
    certificate_specs: tuple[cluster_pki.CertificateSpec, ...],
    etcd_clusters: dict[str, list[EtcdMember]],
    bootstrap_token_id: str,
) -> TestPki:
    vault: dict[str, str] = {}
    cas = {
        key: issue(cn, uses=cluster_pki.CA_USAGES, hours=cluster_pki.CA_VALIDITY_HOURS)
        for key, cn in cluster_pki.CA_COMMON_NAMES.items()
    }
    vault[cluster_pki.cert_secret(cluster_pki.CLUSTER_CA)] = cas[cluster_pki.CLUSTER_CA].cert_pem
    vault[cluster_pki.key_secret(cluster_pki.CLUSTER_CA)] = cas[cluster_pki.CLUSTER_CA].key_pem
    vault[cluster_pki.cert_secret(cluster_pki.FRONT_PROXY_CA)] = cas[cluster_pki.FRONT_PROXY_CA].cert_pem
    leaves = {}
    for spec in certificate_specs:
        leaves[spec.key] = issue(
            spec.common_name,
            uses=spec.usages,
            hours=cluster_pki.LEAF_VALIDITY_HOURS,
            organization=spec.organization,
            dns_names=spec.dns_names,
            ip_addresses=spec.ip_addresses,
            ca=cas[spec.signer],
        )
        vault[cluster_pki.cert_secret(spec.key)] = leaves[spec.key].cert_pem
        vault[cluster_pki.key_secret(spec.key)] = leaves[spec.key].key_pem
    # The test's own kubectl: a system:masters client certificate of the cluster CA, as the deploy and
    # break-glass operators mint one on an apiserver VM (plan/credential.py); here issued directly.
    admin = issue(
        "supercluster-e2e",
        uses=cluster_pki.CLIENT_USAGES,
        hours=24,
        organization=cluster_pki.SUPERUSER_GROUP,
        ca=cas[cluster_pki.CLUSTER_CA],
    )
    service_account = ec.generate_private_key(ec.SECP256R1())
    vault[cluster_pki.SERVICE_ACCOUNT_KEY_SECRET] = service_account.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    vault[cluster_pki.SERVICE_ACCOUNT_PUB_SECRET] = (
        service_account.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    vault[cluster_pki.ENCRYPTION_CONFIG_SECRET] = apiserver.encryption_config(
        base64.b64encode(secrets.token_bytes(32)).decode()
    )
    token = f"{bootstrap_token_id}.{_token_part(token_minting.TOKEN_SECRET_LENGTH)}"
    vault[secret_names.NODE_BOOTSTRAP_TOKEN] = token

    # The etcd CAs as components/etcd_pki.py issues them: one per etcd cluster, one for the apiserver's client.
    etcd_cas = {role: _issue_profile(etcd_pki.ca_profile(cluster_name, role), None) for role in etcd_clusters}
    client_ca = _issue_profile(etcd_pki.client_ca_profile(cluster_name), None)
    vault[secret_names.APISERVER_ETCD_CAS] = etcd_pki.bundle(*(ca.cert_pem for ca in etcd_cas.values()))
    client = _issue_profile(etcd_pki.apiserver_client_profile(), client_ca)
    vault[secret_names.APISERVER_ETCD_CLIENT_CERT] = client.cert_pem
    vault[secret_names.APISERVER_ETCD_CLIENT_KEY] = client.key_pem
    for role in etcd_clusters:
        vault[secret_names.etcd_ca_cert(role)] = etcd_cas[role].cert_pem
        vault[secret_names.etcd_client_cas(role)] = etcd_pki.bundle(etcd_cas[role].cert_pem, client_ca.cert_pem)
    for role, member in ((role, member) for role, members in etcd_clusters.items() for member in members):
        for kind, profile in (("server", etcd_pki.server_profile(member)), ("peer", etcd_pki.peer_profile(member))):
            issued = _issue_profile(profile, etcd_cas[role])
            vault[etcd_pki.member_secret_name(member, kind, "crt")] = issued.cert_pem
            vault[etcd_pki.member_secret_name(member, kind, "key")] = issued.key_pem
    return TestPki(vault, cas[cluster_pki.CLUSTER_CA], admin, token)


def _issue_profile(profile: etcd_pki.CertProfile, ca: Issued | None) -> Issued:
    return issue(
        profile.common_name,
        uses=profile.allowed_uses,
        hours=profile.validity_hours,
        organization=profile.organization,
        dns_names=profile.dns_names,
        ip_addresses=profile.ip_addresses,
        ca=ca,
    )


def _token_part(length: int) -> str:
    """``[a-z0-9]``, as the components' RandomString/RandomPassword make it."""
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    return "".join(secrets.choice(alphabet) for _ in range(length))


def node_csr(
    node: str, csr_name: str, signer: str, usages: list[str], ips: tuple[str, ...] = ()
) -> tuple[ec.EllipticCurvePrivateKey, dict]:
    """A fresh key and a CertificateSigningRequest object for ``system:node:<node>`` (O ``system:nodes``), as a
    kubelet (or someone holding its credentials) sends one; with ``ips``, it names the node and those addresses."""
    key = ec.generate_private_key(ec.SECP256R1())
    builder = x509.CertificateSigningRequestBuilder().subject_name(_name(f"system:node:{node}", "system:nodes"))
    if ips:
        names = [x509.DNSName(node), *(x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips)]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    request = builder.sign(key, hashes.SHA256())
    csr = {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": csr_name},
        "spec": {
            "request": base64.b64encode(request.public_bytes(serialization.Encoding.PEM)).decode(),
            "signerName": signer,
            "usages": usages,
        },
    }
    return key, csr
