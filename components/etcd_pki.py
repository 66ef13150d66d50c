"""The etcd CA (separate from the cluster CA, shared by both etcd clusters) and what it signs.

The CA's key never leaves Pulumi state (a secret there); the CA certificate goes to Key Vault
for the members and the apiservers, and the apiserver's client certificate and key go to Key
Vault for the apiservers only. ``issue`` signs one leaf for a caller (the etcd clusters' members).
Profiles (names, SANs, usages, lifetimes) come from ``infra.etcd.certificates``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi

from components import declare
from components.secret_store import SecretStore
from infra.boot.secret_names import APISERVER_ETCD_CLIENT_CERT, APISERVER_ETCD_CLIENT_KEY, ETCD_CA_CERT
from infra.etcd import certificates
from infra.facts import roles


@dataclass
class IssuedCert:
    cert_pem: pulumi.Output[str]
    private_key_pem: pulumi.Output[str]  # a Pulumi secret


class EtcdPki(pulumi.ComponentResource):
    ca_cert_pem: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        *,
        cluster_name: str,
        secrets: SecretStore,
        ca_readers: Mapping[str, pulumi.Input[str]],
        apiserver_principal_id: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("supercluster:etcd:EtcdPki", name, None, opts)
        profile = certificates.ca_profile(cluster_name)
        # Replacing the CA would invalidate every etcd certificate at once: protected.
        ca_key = declare.tls(
            "PrivateKey",
            f"{name}-ca-key",
            {"algorithm": certificates.KEY_ALGORITHM, "ecdsaCurve": certificates.KEY_CURVE},
            pulumi.ResourceOptions(parent=self, protect=True),
            outputs=["privateKeyPem"],
        )
        ca_cert = declare.tls(
            "SelfSignedCert",
            f"{name}-ca-cert",
            {
                "privateKeyPem": ca_key.output("privateKeyPem"),
                "isCaCertificate": True,
                "subject": {"commonName": profile.common_name, "organization": profile.organization},
                "allowedUses": list(profile.allowed_uses),
                "validityPeriodHours": profile.validity_hours,
                "earlyRenewalHours": profile.early_renewal_hours,
            },
            pulumi.ResourceOptions(parent=self, protect=True),
            outputs=["certPem"],
        )
        self._ca_key_pem = ca_key.output("privateKeyPem")
        self.ca_cert_pem = ca_cert.output("certPem")
        secrets.add_secret(self, f"{name}-ca-cert-secret", ETCD_CA_CERT, self.ca_cert_pem, readers=ca_readers)
        client = self.issue(self, f"{name}-apiserver-client", certificates.apiserver_client_profile())
        apiserver = {roles.APISERVER.identity: apiserver_principal_id}
        secrets.add_secret(
            self, f"{name}-apiserver-client-cert-secret", APISERVER_ETCD_CLIENT_CERT, client.cert_pem, readers=apiserver
        )
        secrets.add_secret(
            self,
            f"{name}-apiserver-client-key-secret",
            APISERVER_ETCD_CLIENT_KEY,
            client.private_key_pem,
            readers=apiserver,
        )
        self.register_outputs({"caCertPem": self.ca_cert_pem})

    def issue(self, owner: pulumi.Resource, logical_name: str, profile: certificates.CertProfile) -> IssuedCert:
        """A fresh key and a certificate signed by the etcd CA; every resource is a child of ``owner``."""
        child = pulumi.ResourceOptions(parent=owner)
        key = declare.tls(
            "PrivateKey",
            f"{logical_name}-key",
            {"algorithm": certificates.KEY_ALGORITHM, "ecdsaCurve": certificates.KEY_CURVE},
            child,
            outputs=["privateKeyPem"],
        )
        request = declare.tls(
            "CertRequest",
            f"{logical_name}-csr",
            {
                "privateKeyPem": key.output("privateKeyPem"),
                "subject": {"commonName": profile.common_name, "organization": profile.organization},
                "ipAddresses": list(profile.ip_addresses) or None,
                "dnsNames": list(profile.dns_names) or None,
            },
            child,
            outputs=["certRequestPem"],
        )
        cert = declare.tls(
            "LocallySignedCert",
            f"{logical_name}-cert",
            {
                "certRequestPem": request.output("certRequestPem"),
                "caPrivateKeyPem": self._ca_key_pem,
                "caCertPem": self.ca_cert_pem,
                "allowedUses": list(profile.allowed_uses),
                "validityPeriodHours": profile.validity_hours,
                "earlyRenewalHours": profile.early_renewal_hours,
            },
            child,
            outputs=["certPem"],
        )
        return IssuedCert(cert_pem=cert.output("certPem"), private_key_pem=key.output("privateKeyPem"))
