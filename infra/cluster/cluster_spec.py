"""The validated inputs of the desired cluster: the config, the address plan, the add-ons' settings, the
last deploy, and the release and machine image the nodes get.

``build_cluster_spec`` validates the config contract, refuses a change the live cluster cannot take
(infra/day2/deploy_rules.py), plans the addresses against Azure's limits and reads the add-ons' settings, in one pass:
the record it returns is complete and never patched. ``infra.assembly.desired_cluster.assemble`` renders the machines
and
the add-on objects from it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from infra.addons import AddonSettings, parse_addon_settings
from infra.config import naming
from infra.config.cluster_config import ClusterConfig, parse_config
from infra.day2.deploy_rules import (
    LastDeploy,
    RollingUpgrade,
    check_kubernetes_upgrade,
    check_live_changes,
    last_deploy,
    node_kubernetes_version,
    node_machine_image_version,
)
from infra.day2.previous_outputs import check_previous_outputs
from infra.network.addressing import AddressPlan, plan_addresses
from infra.node.pool import check_pool_tags


@dataclass(frozen=True)
class ClusterSpec:
    config: ClusterConfig  # as the stack file says: ``kubernetesVersion`` is the control plane's target
    addresses: AddressPlan
    addons: AddonSettings  # every add-on's validated settings (infra/addons)
    last_deploy: LastDeploy  # what the last deploy exported (infra/day2/deploy_rules.py)
    # What nodes, NAT hosts and the autoscaler run: kubernetesVersion once every apiserver does
    # (infra/day2/deploy_rules.py).
    node_kubernetes_version: str
    node_machine_image_version: str  # the image version node models and NAT hosts boot (infra/day2/deploy_rules.py)


# Reads the apiserver scale set's rolling-upgrade state from Azure: (resource group, scale set name).
RollingUpgradeReader = Callable[[str, str], RollingUpgrade]


def build_cluster_spec(
    raw: Mapping[str, Any],
    location: Any,
    previous_outputs: Mapping[str, Any] | None = None,
    read_rolling_upgrade: RollingUpgradeReader | None = None,
) -> ClusterSpec:
    """``previous_outputs``: the stack's outputs from its last deploy (``{}``/None before the first);
    ``read_rolling_upgrade``: asked only when the last deploy had the apiserver scale set (without it, the
    upgrade gate takes the rollout as unfinished)."""
    config = parse_config(raw, location)
    check_pool_tags(config)
    last = last_deploy(check_previous_outputs(previous_outputs or {}, "pulumi:pulumi:readStackOutputs"))
    check_live_changes(last, config)
    if last.apiserver_scale_set is not None and read_rolling_upgrade is not None:
        state = read_rolling_upgrade(
            naming.resource_group(config.cluster_name), naming.apiserver_scale_set(config.cluster_name)
        )
        last = dataclasses.replace(last, apiserver_rolling_upgrade=state)
    check_kubernetes_upgrade(last, config)
    node_version = node_kubernetes_version(last, config)
    return ClusterSpec(
        config=config,
        addresses=plan_addresses(config),
        addons=parse_addon_settings(config, last.monitoring_node_shards),
        last_deploy=last,
        node_kubernetes_version=node_version,
        node_machine_image_version=node_machine_image_version(last, config, node_version),
    )
