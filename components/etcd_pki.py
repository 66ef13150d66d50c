"""The etcd CA (separate from the cluster CA, shared by both etcd clusters) and what it signs.

The CA's key never leaves Pulumi state (a secret there); the CA certificate goes to Key Vault
for the members and the apiservers, and the apiserver's client certificate and key go to Key
Vault for the apiservers only. ``issue`` signs one leaf for a caller (the etcd clusters' members).
Profiles (names, SANs, usages, lifetimes) come from ``infra.etcd.pki``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_tls as tls

from components.secret_store import SecretStore
from infra.etcd import pki
from infra.secret_names import APISERVER_ETCD_CLIENT_CERT, APISERVER_ETCD_CLIENT_KEY, ETCD_CA_CERT


@dataclass
class IssuedCert:
    cert_pem: pulumi.Output[str]
    private_key_pem: pulumi.Output[str]  # a Pulumi secret


class EtcdPki(pulumi.ComponentResource):
    ca_cert_pem: pulumi.Output[str]

    def __init__(self, name: str, *, cluster_name: str, secrets: SecretStore,
                 ca_readers: dict[str, pulumi.Input[str]], apiserver_principal_id: pulumi.Input[str],
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("supercluster:etcd:EtcdPki", name, None, opts)
        profile = pki.ca_profile(cluster_name)
        # Replacing the CA would invalidate every etcd certificate at once: protected.
        ca_key = tls.PrivateKey(f"{name}-ca-key", algorithm=pki.KEY_ALGORITHM, ecdsa_curve=pki.KEY_CURVE,
                                opts=pulumi.ResourceOptions(parent=self, protect=True))
        ca_cert = tls.SelfSignedCert(
            f"{name}-ca-cert",
            private_key_pem=ca_key.private_key_pem,
            is_ca_certificate=True,
            subject=tls.SelfSignedCertSubjectArgs(common_name=profile.common_name,
                                                  organization=profile.organization),
            allowed_uses=list(profile.allowed_uses),
            validity_period_hours=profile.validity_hours,
            early_renewal_hours=profile.early_renewal_hours,
            opts=pulumi.ResourceOptions(parent=self, protect=True),
        )
        self._ca_key_pem = ca_key.private_key_pem
        self.ca_cert_pem = ca_cert.cert_pem
        secrets.add_secret(self, f"{name}-ca-cert-secret", ETCD_CA_CERT, self.ca_cert_pem, readers=ca_readers)
        client = self.issue(self, f"{name}-apiserver-client", pki.apiserver_client_profile())
        apiserver = {"apiserver": apiserver_principal_id}
        secrets.add_secret(self, f"{name}-apiserver-client-cert-secret", APISERVER_ETCD_CLIENT_CERT,
                           client.cert_pem, readers=apiserver)
        secrets.add_secret(self, f"{name}-apiserver-client-key-secret", APISERVER_ETCD_CLIENT_KEY,
                           client.private_key_pem, readers=apiserver)
        self.register_outputs({"caCertPem": self.ca_cert_pem})

    def issue(self, owner: pulumi.Resource, logical_name: str, profile: pki.CertProfile) -> IssuedCert:
        """A fresh key and a certificate signed by the etcd CA; every resource is a child of ``owner``."""
        child = pulumi.ResourceOptions(parent=owner)
        key = tls.PrivateKey(f"{logical_name}-key", algorithm=pki.KEY_ALGORITHM, ecdsa_curve=pki.KEY_CURVE,
                             opts=child)
        request = tls.CertRequest(
            f"{logical_name}-csr",
            private_key_pem=key.private_key_pem,
            subject=tls.CertRequestSubjectArgs(common_name=profile.common_name, organization=profile.organization),
            ip_addresses=list(profile.ip_addresses) or None,
            dns_names=list(profile.dns_names) or None,
            opts=child,
        )
        cert = tls.LocallySignedCert(
            f"{logical_name}-cert",
            cert_request_pem=request.cert_request_pem,
            ca_private_key_pem=self._ca_key_pem,
            ca_cert_pem=self.ca_cert_pem,
            allowed_uses=list(profile.allowed_uses),
            validity_period_hours=profile.validity_hours,
            early_renewal_hours=profile.early_renewal_hours,
            opts=child,
        )
        return IssuedCert(cert_pem=cert.cert_pem, private_key_pem=key.private_key_pem)
