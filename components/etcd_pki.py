"""The etcd CAs (one per etcd cluster and one for the apiserver's client certificate) and what they sign.

The CA keys never leave Pulumi state (secrets there). Key Vault gets, one secret each: every cluster's CA
(its peer trust) and its client trust (its CA and the client CA) for that cluster's members, both
clusters' CAs and the client certificate and key for the apiservers. ``issue`` signs one member's leaf
with its own cluster's CA. Profiles (names, SANs, usages, lifetimes) come from ``infra.etcd.certificates``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi

from components import declare
from components.secret_store import SecretStore
from infra.boot.secret_names import (
    APISERVER_ETCD_CAS,
    APISERVER_ETCD_CLIENT_CERT,
    APISERVER_ETCD_CLIENT_KEY,
    etcd_ca_cert,
    etcd_client_cas,
)
from infra.etcd import certificates
from infra.etcd.spec import MAIN
from infra.facts import roles


@dataclass
class IssuedCert:
    cert_pem: pulumi.Output[str]
    private_key_pem: pulumi.Output[str]  # a Pulumi secret


@dataclass
class _Ca:
    key_pem: pulumi.Output[str]
    cert_pem: pulumi.Output[str]


def _bundle(*pems: pulumi.Output[str]) -> pulumi.Output[str]:
    return pulumi.Output.all(*pems).apply(lambda values: certificates.bundle(*values))


class EtcdPki(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        *,
        cluster_name: str,
        secrets: SecretStore,
        member_principal_ids: Mapping[str, pulumi.Input[str]],
        apiserver_principal_id: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """``member_principal_ids``: each etcd cluster's role (``etcd``, ``events-etcd``) -> its identity."""
        super().__init__("supercluster:etcd:EtcdPki", name, None, opts)
        # The main cluster's resources keep the logical names of the one CA both clusters shared, so an
        # existing cluster's main members keep their certificates.
        prefixes = {role: name if role == MAIN else f"{name}-{role}" for role in member_principal_ids}
        self._cas = {
            role: self._ca(f"{prefix}-ca", certificates.ca_profile(cluster_name, role))
            for role, prefix in prefixes.items()
        }
        client_ca = self._ca(f"{name}-client-ca", certificates.client_ca_profile(cluster_name))
        for role, principal_id in member_principal_ids.items():
            readers = {role: principal_id}
            ca = self._cas[role].cert_pem
            prefix = prefixes[role]
            secrets.add_secret(self, f"{prefix}-ca-cert-secret", etcd_ca_cert(role), ca, readers=readers)
            secrets.add_secret(
                self, f"{prefix}-client-cas-secret", etcd_client_cas(role), _bundle(ca, client_ca.cert_pem), readers
            )
        apiserver = {roles.APISERVER.identity: apiserver_principal_id}
        server_cas = _bundle(*(ca.cert_pem for ca in self._cas.values()))
        secrets.add_secret(self, f"{name}-apiserver-cas-secret", APISERVER_ETCD_CAS, server_cas, readers=apiserver)
        client = self._sign(self, f"{name}-apiserver-client", certificates.apiserver_client_profile(), client_ca)
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
        self.register_outputs({"caCertPems": {role: ca.cert_pem for role, ca in self._cas.items()}})

    def _ca(self, logical_name: str, profile: certificates.CertProfile) -> _Ca:
        # Replacing a CA would invalidate every certificate it signed at once: protected.
        protected = pulumi.ResourceOptions(parent=self, protect=True)
        key = declare.tls(
            "PrivateKey",
            f"{logical_name}-key",
            {"algorithm": certificates.KEY_ALGORITHM, "ecdsaCurve": certificates.KEY_CURVE},
            protected,
            outputs=["privateKeyPem"],
        )
        cert = declare.tls(
            "SelfSignedCert",
            f"{logical_name}-cert",
            {
                "privateKeyPem": key.output("privateKeyPem"),
                "isCaCertificate": True,
                "subject": {"commonName": profile.common_name, "organization": profile.organization},
                "allowedUses": list(profile.allowed_uses),
                "validityPeriodHours": profile.validity_hours,
                "earlyRenewalHours": profile.early_renewal_hours,
            },
            protected,
            outputs=["certPem"],
        )
        return _Ca(key_pem=key.output("privateKeyPem"), cert_pem=cert.output("certPem"))

    def issue(
        self, owner: pulumi.Resource, role: str, logical_name: str, profile: certificates.CertProfile
    ) -> IssuedCert:
        """A fresh key and a certificate signed by the CA of the etcd cluster ``role``; every resource is a
        child of ``owner``."""
        return self._sign(owner, logical_name, profile, self._cas[role])

    @staticmethod
    def _sign(owner: pulumi.Resource, logical_name: str, profile: certificates.CertProfile, ca: _Ca) -> IssuedCert:
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
                "caPrivateKeyPem": ca.key_pem,
                "caCertPem": ca.cert_pem,
                "allowedUses": list(profile.allowed_uses),
                "validityPeriodHours": profile.validity_hours,
                "earlyRenewalHours": profile.early_renewal_hours,
            },
            child,
            outputs=["certPem"],
        )
        return IssuedCert(cert_pem=cert.output("certPem"), private_key_pem=key.output("privateKeyPem"))
