"""Everything the program decides before it declares a single resource.

``build_cluster_spec`` is the whole validation pass: the config contract, then the
address plan against Azure's limits. Any ``ConfigError`` stops the program here,
so nothing is ever half-declared.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from infra.addons import AddonSettings, parse_addon_settings
from infra.addressing import AddressPlan, plan_addresses
from infra.config import ClusterConfig, parse_config
from infra.node.pool import check_custom_data, check_pool_tags


@dataclass(frozen=True)
class ClusterSpec:
    config: ClusterConfig
    addresses: AddressPlan
    addons: AddonSettings  # every add-on's validated settings (infra/addons)


def build_cluster_spec(raw: Mapping[str, Any], location: Any) -> ClusterSpec:
    config = parse_config(raw, location)
    check_pool_tags(config)
    spec = ClusterSpec(config=config, addresses=plan_addresses(config), addons=parse_addon_settings(config))
    check_custom_data(spec)
    return spec
