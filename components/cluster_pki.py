"""The cluster's CAs and certificates, issued by pulumi-tls from the specs in ``infra.control_plane.pki``.

Private keys live only in Pulumi state (encrypted by the stack's secrets provider) and in Key
Vault; every output that contains one is a Pulumi secret. The CAs and the service-account key are
protected: replacing one would invalidate every certificate it signed (every node's, every
kubeconfig's) or every service-account token at once. Leaf certificates are not: they renew.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components import declare
from infra.control_plane import pki


@dataclass(frozen=True)
class Issued:
    key_pem: pulumi.Output[str]  # a Pulumi secret
    cert_pem: pulumi.Output[str]


class ClusterPki(pulumi.ComponentResource):
    cas: dict[str, Issued]
    certs: dict[str, Issued]
    service_account_key: declare.Declared  # privateKeyPem (secret), publicKeyPem

    def __init__(
        self, name: str, *, specs: tuple[pki.CertificateSpec, ...], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("supercluster:cluster_pki:ClusterPki", name, None, opts)
        self._name = name
        self.cas = {key: self._ca(key, common_name) for key, common_name in pki.CA_COMMON_NAMES.items()}
        self.certs = {spec.key: self._leaf(spec) for spec in specs}
        # Signs and verifies service-account tokens (--service-account-signing-key-file / -key-file).
        self.service_account_key = self._key("service-account", protect=True)
        self.register_outputs(
            {
                "caCertPem": self.cas[pki.CLUSTER_CA].cert_pem,
                "frontProxyCaCertPem": self.cas[pki.FRONT_PROXY_CA].cert_pem,
            }
        )

    def _key(self, key: str, protect: bool = False) -> declare.Declared:
        return private_key(f"{self._name}-{key}-key", self, protect)

    def _ca(self, key: str, common_name: str) -> Issued:
        private_key = self._key(key, protect=True)
        cert = declare.tls(
            "SelfSignedCert",
            f"{self._name}-{key}-cert",
            {
                "privateKeyPem": private_key.output("privateKeyPem"),
                "isCaCertificate": True,
                "subject": {"commonName": common_name},
                "validityPeriodHours": pki.CA_VALIDITY_HOURS,
                "allowedUses": list(pki.CA_USAGES),
            },
            pulumi.ResourceOptions(parent=self, protect=True),
            outputs=["certPem"],
        )
        return Issued(pulumi.Output.secret(private_key.output("privateKeyPem")), cert.output("certPem"))

    def _leaf(self, spec: pki.CertificateSpec) -> Issued:
        private_key = self._key(spec.key)
        request = declare.tls(
            "CertRequest",
            f"{self._name}-{spec.key}-csr",
            {
                "privateKeyPem": private_key.output("privateKeyPem"),
                "subject": {"commonName": spec.common_name, "organization": spec.organization},
                "dnsNames": list(spec.dns_names) or None,
                "ipAddresses": list(spec.ip_addresses) or None,
            },
            pulumi.ResourceOptions(parent=self),
            outputs=["certRequestPem"],
        )
        ca = self.cas[spec.signer]
        cert = declare.tls(
            "LocallySignedCert",
            f"{self._name}-{spec.key}-cert",
            {
                "certRequestPem": request.output("certRequestPem"),
                "caPrivateKeyPem": ca.key_pem,
                "caCertPem": ca.cert_pem,
                "validityPeriodHours": spec.validity_hours,
                "earlyRenewalHours": spec.early_renewal_hours,
                "allowedUses": list(spec.usages),
            },
            pulumi.ResourceOptions(parent=self),
            outputs=["certPem"],
        )
        return Issued(pulumi.Output.secret(private_key.output("privateKeyPem")), cert.output("certPem"))


def private_key(name: str, parent: pulumi.Resource, protect: bool = False) -> declare.Declared:
    """A key of the cluster's algorithm and curve (``privateKeyPem`` a secret, ``publicKeyPem``)."""
    return declare.tls(
        "PrivateKey",
        name,
        {"algorithm": pki.KEY_ALGORITHM, "ecdsaCurve": pki.KEY_CURVE},
        pulumi.ResourceOptions(parent=parent, protect=protect),
        outputs=["privateKeyPem", "publicKeyPem"],
    )
