"""The in-cluster objects the control plane needs before nodes can join and gangs can schedule.

Applied through the control plane's kubernetes provider (which waits for every apiserver's
readiness gate): the first bootstrap-token Secret, the node-join and CSR auto-approval bindings, the
token minter's RBAC and admission policy, the PodGroup CRD and the scheduler's access to it, and the API
Priority and Fairness objects. The objects themselves are rendered in ``infra.control_plane.cluster_objects``
and ``infra.control_plane.token_minting`` (the token).

The first token expires at ``first_token_expiration``, which the program passes in (``__main__.py`` reads the
clock, so this component stays a pure declaration); the minter on the apiservers mints every later one. Its
``stringData`` is set once, at creation (``ignore_changes``): a later ``pulumi up`` neither extends its life nor
touches what the minter writes.
"""

from __future__ import annotations

import re

import pulumi

from components import declare
from infra.config.cluster_config import ClusterConfig
from infra.control_plane import cluster_objects, token_minting


class ClusterBootstrap(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        *,
        config: ClusterConfig,
        provider: pulumi.ProviderResource,
        token_id: pulumi.Input[str],
        token_secret: pulumi.Input[str],
        first_token_expiration: str,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("supercluster:cluster_bootstrap:ClusterBootstrap", name, None, opts)
        in_cluster = pulumi.ResourceOptions(parent=self, provider=provider)
        declared = [
            declare.kubernetes(_logical_name(name, document), document, in_cluster)
            for document in cluster_objects.cluster_objects(config)
        ]
        token = declare.kubernetes(
            f"{name}-bootstrap-token",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": pulumi.Output.from_input(token_id).apply(token_minting.bootstrap_token_name),
                    "namespace": token_minting.BOOTSTRAP_TOKEN_NAMESPACE,
                },
                "type": token_minting.BOOTSTRAP_TOKEN_TYPE,
                "stringData": pulumi.Output.all(token_id, token_secret).apply(
                    lambda parts: token_minting.bootstrap_token_data(parts[0], parts[1], first_token_expiration)
                ),
            },
            pulumi.ResourceOptions.merge(in_cluster, pulumi.ResourceOptions(ignore_changes=["stringData"])),
        )
        self.register_outputs({"objects": [resource.urn for resource in [*declared, token]]})


def _logical_name(name: str, document: dict) -> str:
    return f"{name}-{document['kind'].lower()}-{re.sub(r'[^a-z0-9.-]', '-', document['metadata']['name'])}"
