"""The monitoring stack's own credential (infra/addons/monitoring/credential.py): made by the deploy, kept in state
as Pulumi secrets, and handed to the cluster only as the Secret ``credential.SECRET``, whose data the provider masks.

The bcrypt hash is the random provider's own (``bcryptHash``), so no password is hashed by the program.
"""

from __future__ import annotations

import pulumi

from components import declare
from infra.addons.monitoring import credential


class MonitoringAccess(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        *,
        namespace: str,
        provider: pulumi.ProviderResource,
        depends_on: list[pulumi.Resource],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("supercluster:monitoring_access:MonitoringAccess", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        # Letters and digits only: the password sits in files the tools read verbatim, and 32 of 62 symbols
        # hold about 190 bits.
        charset = {"length": 32, "special": False}
        api = declare.random("RandomPassword", f"{name}-api-password", charset, child, outputs=["result", "bcryptHash"])
        grafana = declare.random("RandomPassword", f"{name}-grafana-admin-password", charset, child, outputs=["result"])
        files: pulumi.Output[dict[str, str]] = pulumi.Output.all(
            api.output("result"), api.output("bcryptHash"), grafana.output("result")
        ).apply(lambda values: credential.secret_data(*values))
        data: pulumi.Output[dict[str, str]] = pulumi.Output.secret(files)
        secret = declare.kubernetes(
            f"{name}-secret",
            credential.secret(namespace, data),
            pulumi.ResourceOptions(parent=self, provider=provider, depends_on=depends_on),
        )
        self.register_outputs({"secret": secret.urn})
