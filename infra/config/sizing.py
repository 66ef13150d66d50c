"""How a node pool becomes scale sets: Azure's per-scale-set limits decide the shard count.

Shards are numbered from 0 and only ever appended: growing a pool adds shards at
the end and never renames, re-addresses or replaces an existing one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from infra.config.cluster_config import NodePoolConfig

# Azure: a scale set holds at most 1,000 VMs with singlePlacementGroup=false (Marketplace or
# Compute Gallery images), but only 100 with singlePlacementGroup=true, which InfiniBand
# requires ("Large scale sets do not support InfiniBand").
# learn.microsoft.com/azure/virtual-machine-scale-sets/virtual-machine-scale-sets-placement-groups
MAX_VMS_PER_SCALE_SET = 1_000
MAX_VMS_PER_PLACEMENT_GROUP = 100


@dataclass(frozen=True)
class Shard:
    pool: str
    index: int
    max_nodes: int  # this shard's share of the pool's maxNodes
    min_nodes: int
    capacity: int  # Azure's ceiling for one scale set of this kind

    @property
    def name(self) -> str:
        return f"{self.pool}-s{self.index:03d}"


def shard_capacity(pool: NodePoolConfig) -> int:
    return MAX_VMS_PER_PLACEMENT_GROUP if pool.infiniband else MAX_VMS_PER_SCALE_SET


def shards(pool: NodePoolConfig) -> tuple[Shard, ...]:
    """Fill shards in order; the last one holds the remainder. minNodes is spread the same way."""
    capacity = shard_capacity(pool)
    count = max(1, math.ceil(pool.max_nodes / capacity))
    result = []
    remaining_max, remaining_min = pool.max_nodes, pool.min_nodes
    for index in range(count):
        shard_max = min(capacity, remaining_max)
        shard_min = min(shard_max, remaining_min)
        remaining_max -= shard_max
        remaining_min -= shard_min
        result.append(
            Shard(pool.name, index, 0 if pool.retired else shard_max, 0 if pool.retired else shard_min, capacity)
        )
    return tuple(result)
