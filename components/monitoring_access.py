"""The monitoring stack's own credentials (infra/addons/monitoring/credential.py and alertmanager.py): made by the
deploy, kept in state as Pulumi secrets, and handed to the cluster only as Secrets whose data the provider masks:
``credential.SECRET`` (the APIs' password, its bcrypt hash, Grafana's admin password; a new generation of both
passwords with each ``addons.monitoring.passwordRotation``) and
``alertmanager.CLUSTER_TLS_SECRET`` (the Alertmanager gossip mesh's CA and the certificate every replica presents).

The bcrypt hash is the random provider's own (``bcryptHash``), so no password is hashed by the program. The mesh's CA
is its own (no other certificate opens the mesh, and its key signs nothing else) and protected like the cluster's
CAs: a new one would split the mesh until every replica restarted. Its certificate renews as the cluster's leaves do.
"""

from __future__ import annotations

import pulumi

from components import declare
from components.cluster_pki import private_key
from infra.addons.monitoring import alertmanager, credential
from infra.control_plane import pki


class MonitoringAccess(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        *,
        namespace: str,
        password_rotation: int,
        provider: pulumi.ProviderResource,
        depends_on: list[pulumi.Resource],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("supercluster:monitoring_access:MonitoringAccess", name, None, opts)
        self._name = name
        child = pulumi.ResourceOptions(parent=self)
        # Letters and digits only: the password sits in files the tools read verbatim, and 32 of 62 symbols
        # hold about 190 bits.
        charset: dict[str, object] = {"length": 32, "special": False}
        if password_rotation:
            # A new keeper makes the provider replace the password: a new value and a new bcrypt hash. None before the
            # first rotation, so the passwords made before this key existed are kept.
            charset["keepers"] = {"rotation": str(password_rotation)}
        api = declare.random("RandomPassword", f"{name}-api-password", charset, child, outputs=["result", "bcryptHash"])
        grafana = declare.random("RandomPassword", f"{name}-grafana-admin-password", charset, child, outputs=["result"])
        files: pulumi.Output[dict[str, str]] = pulumi.Output.all(
            api.output("result"), api.output("bcryptHash"), grafana.output("result")
        ).apply(lambda values: credential.secret_data(values[0], values[1], values[2], password_rotation))
        in_cluster = pulumi.ResourceOptions(parent=self, provider=provider, depends_on=depends_on)
        secret = declare.kubernetes(
            f"{name}-secret", credential.secret(namespace, pulumi.Output.secret(files)), in_cluster
        )
        mesh: pulumi.Output[dict[str, str]] = self._mesh_certificate().apply(
            lambda pems: alertmanager.cluster_tls_data(*pems)
        )
        mesh_secret = declare.kubernetes(
            f"{name}-alertmanager-cluster-tls",
            credential.secret(namespace, pulumi.Output.secret(mesh), alertmanager.CLUSTER_TLS_SECRET),
            in_cluster,
        )
        self.register_outputs({"secret": secret.urn, "meshSecret": mesh_secret.urn})

    def _mesh_certificate(self) -> pulumi.Output[list[str]]:
        """``[CA certificate, certificate, key]`` of the Alertmanager mesh, in PEM."""
        ca_key = private_key(f"{self._name}-alertmanager-cluster-ca-key", self, protect=True)
        ca = declare.tls(
            "SelfSignedCert",
            f"{self._name}-alertmanager-cluster-ca-cert",
            {
                "privateKeyPem": ca_key.output("privateKeyPem"),
                "isCaCertificate": True,
                "subject": {"commonName": f"{alertmanager.CLUSTER_SERVER_NAME}-ca"},
                "validityPeriodHours": pki.CA_VALIDITY_HOURS,
                "allowedUses": list(pki.CA_USAGES),
            },
            pulumi.ResourceOptions(parent=self, protect=True),
            outputs=["certPem"],
        )
        key = private_key(f"{self._name}-alertmanager-cluster-key", self)
        request = declare.tls(
            "CertRequest",
            f"{self._name}-alertmanager-cluster-csr",
            {
                "privateKeyPem": key.output("privateKeyPem"),
                "subject": {"commonName": alertmanager.CLUSTER_SERVER_NAME},
                "dnsNames": [alertmanager.CLUSTER_SERVER_NAME],
            },
            pulumi.ResourceOptions(parent=self),
            outputs=["certRequestPem"],
        )
        cert = declare.tls(
            "LocallySignedCert",
            f"{self._name}-alertmanager-cluster-cert",
            {
                "certRequestPem": request.output("certRequestPem"),
                "caPrivateKeyPem": pulumi.Output.secret(ca_key.output("privateKeyPem")),
                "caCertPem": ca.output("certPem"),
                "validityPeriodHours": pki.LEAF_VALIDITY_HOURS,
                "earlyRenewalHours": pki.LEAF_EARLY_RENEWAL_HOURS,
                # Each replica is the server of the peers that dial it and the client of those it dials.
                "allowedUses": list(dict.fromkeys(pki.SERVER_USAGES + pki.CLIENT_USAGES)),
            },
            pulumi.ResourceOptions(parent=self),
            outputs=["certPem"],
        )
        return pulumi.Output.all(ca.output("certPem"), cert.output("certPem"), key.output("privateKeyPem"))
