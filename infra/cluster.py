"""Everything the program decides before it declares a single resource.

``build_cluster_spec`` is the whole validation pass: the config contract, the address
plan against Azure's limits, the add-ons' settings, and the cloud-init of every node pool
shard and of the NAT hosts, rendered here once, so the size Azure would refuse is checked on
the exact text the machines receive. Any ``ConfigError`` stops the program here, so
nothing is ever half-declared.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from infra import naming, traffic_accounting
from infra.addons import AddonSettings, parse_addon_settings
from infra.addressing import AddressPlan, plan_addresses
from infra.cloudinit import render
from infra.config import ClusterConfig, parse_config
from infra.day2 import (
    LastDeploy,
    check_kubernetes_upgrade,
    check_live_changes,
    last_deploy,
    node_kubernetes_version,
    node_machine_image_version,
)
from infra.nat_hosts import nat_host_cloud_config
from infra.node import node_cloud_config
from infra.node.pool import check_custom_data, check_pool_tags, node_spec
from infra.node_checks import check_nodes
from infra.previous_outputs import check_previous_outputs
from infra.sizing import shards


@dataclass(frozen=True)
class ClusterSpec:
    config: ClusterConfig
    addresses: AddressPlan
    addons: AddonSettings  # every add-on's validated settings (infra/addons)
    node_cloud_inits: Mapping[str, str] = field(default_factory=dict)  # shard name -> its nodes' cloud-init
    nat_host_cloud_init: str = ""
    last_deploy: LastDeploy = field(default_factory=LastDeploy)  # what the last deploy exported (infra/day2.py)
    # What nodes, NAT hosts and the autoscaler run: kubernetesVersion once every apiserver does (infra/day2.py).
    node_kubernetes_version: str = ""
    node_machine_image_version: str = ""  # the image version node models and NAT hosts boot (infra/day2.py)
    # Pool name -> host-network DaemonSet pods on its nodes: kubelet's maxPods is the pod IPs plus these.
    host_network_pods: Mapping[str, int] = field(default_factory=dict)


def build_cluster_spec(
    raw: Mapping[str, Any], location: Any, previous_outputs: Mapping[str, Any] | None = None
) -> ClusterSpec:
    """``previous_outputs``: the stack's outputs from its last deploy (``{}``/None before the first)."""
    config = parse_config(raw, location)
    check_pool_tags(config)
    last = last_deploy(check_previous_outputs(previous_outputs or {}, "pulumi:pulumi:readStackOutputs"))
    check_live_changes(last, config)
    check_kubernetes_upgrade(last, config)
    node_version = node_kubernetes_version(last, config)
    node_image = node_machine_image_version(last, config, node_version)
    spec = ClusterSpec(
        config=config,
        addresses=plan_addresses(config),
        addons=parse_addon_settings(config),
        last_deploy=last,
        node_kubernetes_version=node_version,
        node_machine_image_version=node_image,
    )
    # Host ports, pod budget and the cluster as a whole, from what every node and add-on renders.
    host_network_pods = check_nodes(spec.config, spec.addresses, spec.addons)
    return _with_machine_cloud_inits(dataclasses.replace(spec, host_network_pods=host_network_pods))


def _with_machine_cloud_inits(spec: ClusterSpec) -> ClusterSpec:
    addresses = spec.addresses
    # Kubelets (node pools and NAT hosts) follow the apiservers: rendered with the nodes' release.
    config = dataclasses.replace(spec.config, kubernetes_version=spec.node_kubernetes_version)
    vault_name = naming.key_vault(config.cluster_name)
    registry = naming.container_registry_login_server(config.cluster_name)
    boot_steps = traffic_accounting.boot_steps(config, addresses)
    nodes = {}
    for index, pool in enumerate(config.node_pools):
        rendered = None
        for shard in shards(pool):
            # Shards differ only in their nodes' InfiniBand domain: a pool without InfiniBand is rendered once.
            if rendered is None or pool.infiniband:
                node = node_spec(
                    config,
                    addresses,
                    pool,
                    shard,
                    vault_name=vault_name,
                    registry_login_server=registry,
                    host_network_pods=spec.host_network_pods[pool.name],
                )
                rendered = render(node_cloud_config(node, boot_steps))
                check_custom_data(config, index, rendered)
            nodes[shard.name] = rendered
    return dataclasses.replace(
        spec, node_cloud_inits=nodes, nat_host_cloud_init=render(nat_host_cloud_config(config, addresses, vault_name))
    )
