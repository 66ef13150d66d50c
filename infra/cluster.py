"""Everything the program decides before it declares a single resource.

``build_cluster_spec`` is the whole validation pass: the config contract, then the
address plan against Azure's limits. Any ``ConfigError`` stops the program here,
so nothing is ever half-declared.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from infra.addressing import AddressPlan, plan_addresses
from infra.config import ClusterConfig, parse_config
from infra.node.pool import check_pool_tags


@dataclass(frozen=True)
class ClusterSpec:
    config: ClusterConfig
    addresses: AddressPlan


def build_cluster_spec(raw: Mapping[str, Any], location: Any) -> ClusterSpec:
    config = parse_config(raw, location)
    check_pool_tags(config)
    return ClusterSpec(config=config, addresses=plan_addresses(config))
