"""Where the node pools' scale sets live, and the refusal that keeps an older cluster's nodes alive.

Scale sets live in the cluster's node resource group (``naming.node_resource_group``), which
holds nothing else: the cluster autoscaler's identity may change everything in that group and
nothing outside it. Clusters deployed before that rule had their scale sets in the cluster's
own group. Azure cannot move a scale set between groups in place: Pulumi would replace it,
deleting every node and the jobs on them (and the scale sets are protected, so the deploy would
fail halfway). So a deploy whose last run put scale sets anywhere else is refused before any
resource is touched (``infra.assembly.desired_cluster.check_last_deploy``), naming the way forward
(docs/security.md, "An existing cluster").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infra.config import naming
from infra.config.errors import ConfigError


def previous_scale_set_groups(cluster_output: Any) -> dict[str, str]:
    """``{scale set id: resource group name}`` from the last deploy's ``cluster`` output
    (``nodePools.<pool>.shards[].scaleSetId``); ``{}`` on the first deploy."""
    pools = cluster_output.get("nodePools") if isinstance(cluster_output, Mapping) else None
    groups: dict[str, str] = {}
    for pool in (pools or {}).values() if isinstance(pools, Mapping) else ():
        for shard in (pool.get("shards") or []) if isinstance(pool, Mapping) else ():
            scale_set_id = shard.get("scaleSetId") if isinstance(shard, Mapping) else None
            if isinstance(scale_set_id, str):
                parts = scale_set_id.split("/")
                lowered = [p.lower() for p in parts]
                if "resourcegroups" in lowered:
                    groups[scale_set_id] = parts[lowered.index("resourcegroups") + 1]
    return groups


def check_scale_sets_stay(cluster_output: Any, cluster_name: str) -> None:
    """Refuses a deploy that would move running scale sets out of the cluster's own resource group (where
    releases before the node group put them) into the node resource group. Any other change of group
    (renaming the cluster replaces everything) is the plan diff's to flag, not this check's."""
    cluster_group = cluster_output.get("resourceGroupName") if isinstance(cluster_output, Mapping) else None
    if not isinstance(cluster_group, str):
        return
    # Azure resource group names are case-insensitive.
    legacy = sorted(
        i for i, group in previous_scale_set_groups(cluster_output).items() if group.lower() == cluster_group.lower()
    )
    if legacy:
        expected = naming.node_resource_group(cluster_name)
        raise ConfigError(
            "clusterName",
            cluster_name,
            f"a cluster whose scale sets are in {expected}; the last deploy left {len(legacy)} in {cluster_group} "
            f"(e.g. {legacy[0].rsplit('/', 1)[-1]}), and moving them replaces every node. Build the node "
            f"resource group with a new cluster, or keep deploying this one with the release that created it "
            f'(docs/security.md, "An existing cluster")',
        )
