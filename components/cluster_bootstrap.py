"""The in-cluster objects the control plane needs before nodes can join and gangs can schedule.

Applied through the control plane's kubernetes provider (which waits for every apiserver's
readiness gate): the bootstrap-token Secret, the node-join and CSR auto-approval bindings, the
PodGroup CRD and the scheduler's access to it, and the API Priority and Fairness objects. The
objects themselves are rendered in ``infra.control_plane.cluster_objects``.
"""

from __future__ import annotations

import re

import pulumi
import pulumi_kubernetes as kubernetes

from infra.control_plane import cluster_objects

_KINDS = {
    "ClusterRole": kubernetes.rbac.v1.ClusterRole,
    "ClusterRoleBinding": kubernetes.rbac.v1.ClusterRoleBinding,
    "CustomResourceDefinition": kubernetes.apiextensions.v1.CustomResourceDefinition,
    "PriorityLevelConfiguration": kubernetes.flowcontrol.v1.PriorityLevelConfiguration,
    "FlowSchema": kubernetes.flowcontrol.v1.FlowSchema,
}


class ClusterBootstrap(pulumi.ComponentResource):
    def __init__(self, name: str, *, provider: kubernetes.Provider, token_id: pulumi.Input[str],
                 token_secret: pulumi.Input[str], opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("supercluster:cluster_bootstrap:ClusterBootstrap", name, None, opts)
        in_cluster = pulumi.ResourceOptions(parent=self, provider=provider)
        declared = [self._declare(name, document, in_cluster) for document in cluster_objects.cluster_objects()]
        token = kubernetes.core.v1.Secret(
            f"{name}-bootstrap-token",
            metadata={"name": pulumi.Output.from_input(token_id).apply(cluster_objects.bootstrap_token_name),
                      "namespace": cluster_objects.BOOTSTRAP_TOKEN_NAMESPACE},
            type=cluster_objects.BOOTSTRAP_TOKEN_TYPE,
            string_data=pulumi.Output.secret(pulumi.Output.all(token_id, token_secret).apply(
                lambda parts: cluster_objects.bootstrap_token_data(*parts))),
            opts=in_cluster,
        )
        self.register_outputs({"objects": [resource.urn for resource in [*declared, token]]})

    @staticmethod
    def _declare(name: str, document: dict, opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
        kind, object_name = document["kind"], document["metadata"]["name"]
        fields = {_snake(key): value for key, value in document.items() if key not in ("apiVersion", "kind")}
        logical = f"{name}-{kind.lower()}-{re.sub(r'[^a-z0-9.-]', '-', object_name)}"
        return _KINDS[kind](logical, **fields, opts=opts)


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()
