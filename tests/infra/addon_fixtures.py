"""Builders shared by the add-on tests: a cluster spec or the whole assembled cluster from a fixture config,
with add-on overrides."""

from __future__ import annotations

from typing import Any

from infra.addons import AzureAccess, build_addon_objects, monitoring
from infra.addons.k8s import Obj, object_key
from infra.assembly.desired_cluster import Cluster, assemble
from infra.cluster.cluster_spec import ClusterSpec, build_cluster_spec
from tests.helpers import raw_config

AZURE = AzureAccess(
    subscription_id="00000000-0000-0000-0000-000000000000",
    resource_group="dev-rg",
    identity_client_id="11111111-2222-3333-4444-555555555555",
)


def raw_for(shape: str = "dev", addons: dict[str, Any] | None = None, **changes: Any) -> dict[str, Any]:
    """A fixture config (``tests/fixtures``) with top-level ``changes`` and, if given, these ``addons``."""
    raw = raw_config(shape)
    raw.update(changes)
    if addons is not None:
        raw["addons"] = addons
    return raw


def spec_for(shape: str = "dev", addons: dict[str, Any] | None = None, **changes: Any) -> ClusterSpec:
    return build_cluster_spec(raw_for(shape, addons, **changes), "eastus")


def cluster_for(shape: str = "dev", addons: dict[str, Any] | None = None, **changes: Any) -> Cluster:
    """The whole desired cluster (``infra.assembly.desired_cluster``): every machine's cloud-init, every add-on
    object."""
    return assemble(raw_for(shape, addons, **changes), "eastus")


def node_cloud_inits(cluster: Cluster) -> dict[str, str]:
    """``{shard name: cloud-init}`` of every scale set."""
    return {shard.shard.name: shard.cloud_init for shard in cluster.shards}


def groups_for(stack: str = "dev", addons: dict[str, Any] | None = None, **changes: Any) -> dict[str, list[Obj]]:
    return groups_of(spec_for(stack, addons, **changes))


def groups_of(spec: ClusterSpec) -> dict[str, list[Obj]]:
    """Every add-on group of a built spec, as ``components/addons.py`` declares them."""
    return build_addon_objects(
        spec.config, spec.addresses, spec.addons, AZURE, node_kubernetes_version=spec.node_kubernetes_version
    )


def prometheus_configs_of(spec: ClusterSpec) -> dict[str, str]:
    """``{shard name: prometheus.yml}`` of a built spec."""
    return monitoring.prometheus_configs(spec.config, spec.addresses, spec.addons.monitoring)


def shard_names_of(spec: ClusterSpec) -> list[str]:
    return monitoring.shard_names(spec.config, spec.addons.monitoring)


def rule_files_of(spec: ClusterSpec) -> dict[str, dict[str, str]]:
    return monitoring.rule_files(spec.addons.cluster_autoscaler.max_total_unready_percentage)


def all_objects(groups: dict[str, list[Obj]]) -> list[Obj]:
    return [obj for objs in groups.values() for obj in objs]


def find(groups: dict[str, list[Obj]], kind: str, name: str) -> Obj:
    found = [obj for obj in all_objects(groups) if obj["kind"] == kind and obj["metadata"]["name"] == name]
    assert len(found) == 1, f"{len(found)} {kind}/{name}"
    return found[0]


def keys(objects: list[Obj]) -> set[tuple[str, str, str]]:
    return {object_key(obj) for obj in objects}
