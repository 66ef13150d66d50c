"""Removing a node pool takes two deploys: first it is retired, then it may be removed.

Removing a pool from ``nodePools`` deletes its scale sets and every node in them, with whatever
ran there. So a pool may leave the config only if the last deploy already had it ``retired:
true`` (no new nodes, autoscaler max 0), which gave the operators a deploy's time to drain it.
What the last deploy had comes from the stack's own ``cluster`` output (the outputs contract,
``infra/contract.py``: ``nodePools.<name>.retired``), read by ``infra.assembly.desired_cluster.check_last_deploy``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infra.config.cluster_config import ClusterConfig
from infra.config.errors import ConfigError


def previous_pools(cluster_output: Any) -> dict[str, bool]:
    """``{pool name: retired}`` from the last deploy's ``cluster`` output; ``{}`` when there is none
    (the first deploy). A pool whose ``retired`` is anything but ``true`` counts as not retired."""
    pools = cluster_output.get("nodePools") if isinstance(cluster_output, Mapping) else None
    if not isinstance(pools, Mapping):
        return {}
    return {str(name): isinstance(pool, Mapping) and pool.get("retired") is True for name, pool in pools.items()}


def check_pool_removals(cluster_output: Any, config: ClusterConfig) -> None:
    """Refuses a config that drops a pool the last deploy had not retired."""
    kept = [pool.name for pool in config.node_pools]
    for name, retired in sorted(previous_pools(cluster_output).items()):
        if name not in kept and not retired:
            raise ConfigError(
                "nodePools",
                kept,
                f"pool {name} still listed: the last deploy ran it without retired: true, and removing a pool "
                f"deletes every node in it. Set retired: true on it and deploy, drain it, then remove it "
                f"(docs/runbooks/remove-a-pool.md)",
            )
