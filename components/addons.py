"""The cluster add-ons (infra/addons), applied through the Kubernetes provider built from the admin kubeconfig.

Each object the assembly built (``infra.assembly.desired_cluster.Cluster.addons``) becomes one pulumi-kubernetes
resource of its own kind (so a preview shows object-level diffs), parented here and bound to
the given provider. Namespaces, priority classes and runtime classes are declared first;
everything else depends on exactly the ones it names, so turning an add-on off touches only
that add-on's resources. The values only the deploy knows (``infra.assembly.desired_cluster.DeployTime``: the
cluster autoscaler's subscription and identity) are put in place of their markers here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi

from components import declare
from infra.addons.k8s import Obj, object_key
from infra.assembly.desired_cluster import DeployTime

FOUNDATION_KINDS = ("Namespace", "PriorityClass", "RuntimeClass")


class ClusterAddons(pulumi.ComponentResource):
    resources: dict[tuple[str, str, str], declare.Declared]

    def __init__(
        self,
        name: str,
        *,
        groups: Mapping[str, list[Obj]],
        provider: pulumi.ProviderResource,
        deploy_time: Mapping[DeployTime, pulumi.Input[str]] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("supercluster:addons:ClusterAddons", name, None, opts)
        ordered = [_filled(obj, deploy_time or {}) for objs in groups.values() for obj in objs]
        ordered.sort(key=lambda obj: obj["kind"] not in FOUNDATION_KINDS)  # stable: foundation first
        self.resources = {}
        for obj in ordered:
            needs = [self.resources[key] for key in _foundation_needed(obj) if key in self.resources]
            self.resources[object_key(obj)] = declare.kubernetes(
                f"{name}-{_logical_suffix(obj)}",
                obj,
                pulumi.ResourceOptions(parent=self, provider=provider, depends_on=needs or None),
            )
        self.register_outputs({"addons": sorted(groups), "objects": len(self.resources)})


def _foundation_needed(obj: Obj) -> list[tuple[str, str, str]]:
    needed = []
    namespace = obj["metadata"].get("namespace")
    if namespace:
        needed.append(("Namespace", "", namespace))
    pod = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    if pod.get("priorityClassName"):
        needed.append(("PriorityClass", "", pod["priorityClassName"]))
    if pod.get("runtimeClassName"):
        needed.append(("RuntimeClass", "", pod["runtimeClassName"]))
    return needed


def _logical_suffix(obj: Obj) -> str:
    kind, namespace, object_name = object_key(obj)
    parts = [kind.lower(), *([namespace] if namespace else []), object_name]
    return "-".join(parts).replace(":", "-")


def _filled(value: Any, deploy_time: Mapping[DeployTime, pulumi.Input[str]]) -> Any:
    """A copy of ``value`` with each ``DeployTime`` marker replaced by the deploy's value."""
    if isinstance(value, DeployTime):
        return deploy_time[value]
    if isinstance(value, dict):
        return {key: _filled(item, deploy_time) for key, item in value.items()}
    if isinstance(value, list):
        return [_filled(item, deploy_time) for item in value]
    return value
