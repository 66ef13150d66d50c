"""The cluster's CAs and certificates, issued by pulumi-tls from the specs in ``infra.control_plane.pki``.

Private keys live only in Pulumi state (encrypted by the stack's secrets provider) and in Key
Vault; every output that contains one is a Pulumi secret. The CAs and the service-account key are
protected: replacing one would invalidate every certificate it signed (every node's, every
kubeconfig's) or every service-account token at once. Leaf certificates are not: they renew.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_tls as tls

from infra.control_plane import pki


@dataclass(frozen=True)
class Issued:
    private_key: tls.PrivateKey
    cert_pem: pulumi.Output[str]

    @property
    def key_pem(self) -> pulumi.Output[str]:
        return pulumi.Output.secret(self.private_key.private_key_pem)


class ClusterPki(pulumi.ComponentResource):
    cas: dict[str, Issued]
    certs: dict[str, Issued]
    service_account_key: tls.PrivateKey

    def __init__(self, name: str, *, specs: tuple[pki.CertificateSpec, ...],
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("supercluster:cluster_pki:ClusterPki", name, None, opts)
        self._name = name
        self.cas = {key: self._ca(key, common_name) for key, common_name in pki.CA_COMMON_NAMES.items()}
        self.certs = {spec.key: self._leaf(spec) for spec in specs}
        # Signs and verifies service-account tokens (--service-account-signing-key-file / -key-file).
        self.service_account_key = self._key("service-account", protect=True)
        self.register_outputs({
            "caCertPem": self.cas[pki.CLUSTER_CA].cert_pem,
            "frontProxyCaCertPem": self.cas[pki.FRONT_PROXY_CA].cert_pem,
        })

    def _key(self, key: str, protect: bool = False) -> tls.PrivateKey:
        return tls.PrivateKey(f"{self._name}-{key}-key", algorithm=pki.KEY_ALGORITHM, ecdsa_curve=pki.KEY_CURVE,
                              opts=pulumi.ResourceOptions(parent=self, protect=protect))

    def _ca(self, key: str, common_name: str) -> Issued:
        private_key = self._key(key, protect=True)
        cert = tls.SelfSignedCert(
            f"{self._name}-{key}-cert",
            private_key_pem=private_key.private_key_pem,
            is_ca_certificate=True,
            subject=tls.SelfSignedCertSubjectArgs(common_name=common_name),
            validity_period_hours=pki.CA_VALIDITY_HOURS,
            allowed_uses=list(pki.CA_USAGES),
            opts=pulumi.ResourceOptions(parent=self, protect=True),
        )
        return Issued(private_key, cert.cert_pem)

    def _leaf(self, spec: pki.CertificateSpec) -> Issued:
        private_key = self._key(spec.key)
        request = tls.CertRequest(
            f"{self._name}-{spec.key}-csr",
            private_key_pem=private_key.private_key_pem,
            subject=tls.CertRequestSubjectArgs(common_name=spec.common_name,
                                               organization=spec.organization),
            dns_names=list(spec.dns_names) or None,
            ip_addresses=list(spec.ip_addresses) or None,
            opts=pulumi.ResourceOptions(parent=self),
        )
        ca = self.cas[spec.signer]
        cert = tls.LocallySignedCert(
            f"{self._name}-{spec.key}-cert",
            cert_request_pem=request.cert_request_pem,
            ca_private_key_pem=ca.private_key.private_key_pem,
            ca_cert_pem=ca.cert_pem,
            validity_period_hours=pki.LEAF_VALIDITY_HOURS,
            early_renewal_hours=pki.LEAF_EARLY_RENEWAL_HOURS,
            allowed_uses=list(spec.usages),
            opts=pulumi.ResourceOptions(parent=self),
        )
        return Issued(private_key, cert.cert_pem)
