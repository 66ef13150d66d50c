"""Cluster add-ons as plain Kubernetes objects: one module per add-on, each a pure builder.

Every add-on module has ``KEY`` (its key under ``addons`` in config), ``parse(raw, config)``
(its settings, strictly: unknown keys refused, errors naming ``addons.<key>.<setting>``) and
``objects(...)`` (the objects it applies, built from only the settings and facts it reads, never the
whole ``ClusterSpec``, so the add-ons sit below ``infra.cluster.cluster_spec``). ``ADDONS`` is the table
of them: one row per add-on, its module and its builder call, in the order the objects are applied.
``base`` is what they share and is always rendered.

``parse_addon_settings`` runs inside ``infra.cluster.cluster_spec.build_cluster_spec``, so a bad
setting stops the program before any resource; ``build_addon_objects`` runs once, in
``infra.assembly.desired_cluster.assemble``, and ``components/addons.py`` declares what it built.
Every container image an add-on names (from infra/addons/images.py) is rewritten there to its copy
in the cluster's private registry, so no pod pulls from a public registry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from infra.addons import (
    balloons,
    base,
    cluster_autoscaler,
    coredns,
    gpu_health_check,
    images,
    k8s,
    monitoring,
    node_local_dns,
    nvidia_device_plugin,
    rdma_device_plugin,
    traffic_accounting,
)
from infra.addons.cluster_autoscaler import AzureAccess
from infra.config import naming
from infra.config.cluster_config import ADDON_KEYS, ClusterConfig
from infra.config.errors import ConfigError
from infra.network.addressing import AddressPlan

BASE = "base"

__all__ = [
    "ADDONS",
    "Addon",
    "AddonSettings",
    "AzureAccess",
    "BASE",
    "BuildInputs",
    "build_addon_objects",
    "parse_addon_settings",
]


@dataclass(frozen=True)
class AddonSettings:
    coredns: coredns.Settings
    node_local_dns: node_local_dns.Settings
    cluster_autoscaler: cluster_autoscaler.Settings
    balloons: balloons.Settings
    nvidia_device_plugin: nvidia_device_plugin.Settings
    rdma_device_plugin: rdma_device_plugin.Settings
    gpu_health_check: gpu_health_check.Settings
    traffic_accounting: traffic_accounting.Settings
    monitoring: monitoring.Settings


@dataclass(frozen=True)
class BuildInputs:
    """What the add-on builders read, each taking only its part."""

    config: ClusterConfig
    addresses: AddressPlan
    settings: AddonSettings
    azure: AzureAccess | None  # needed by the autoscaler only
    node_release: str  # the release the nodes run (ClusterSpec.node_kubernetes_version)


@dataclass(frozen=True)
class Addon:
    """One row of the add-on table: the module (``KEY``, ``parse``, ``objects``) and how its objects are built."""

    module: ModuleType
    build: Callable[[BuildInputs], list[k8s.Obj]]

    @property
    def key(self) -> str:
        """Its key under ``addons`` in config."""
        key: str = self.module.KEY
        return key

    @property
    def attr(self) -> str:
        """Its attribute of ``AddonsConfig`` and ``AddonSettings``."""
        return ADDON_KEYS[self.key]


# The add-on table, in the order the objects are applied: config keys, settings, builders and the config
# reference (plan.config_docs) all come from it; tests/infra/test_addons_toggle.py holds it to ADDON_KEYS and
# AddonSettings.
ADDONS = (
    Addon(coredns, lambda i: coredns.objects(i.config, i.addresses, i.settings.coredns)),
    Addon(node_local_dns, lambda i: node_local_dns.objects(i.addresses, i.settings.node_local_dns)),
    Addon(
        cluster_autoscaler,
        lambda i: cluster_autoscaler.objects(
            i.config, i.settings.cluster_autoscaler, _require(i.azure), i.node_release
        ),
    ),
    Addon(balloons, lambda i: balloons.objects(i.config, i.settings.balloons)),
    Addon(nvidia_device_plugin, lambda i: nvidia_device_plugin.objects()),
    Addon(rdma_device_plugin, lambda i: rdma_device_plugin.objects(i.settings.rdma_device_plugin)),
    Addon(gpu_health_check, lambda i: gpu_health_check.objects(i.config, i.settings.gpu_health_check)),
    Addon(traffic_accounting, lambda i: traffic_accounting.objects(i.settings.traffic_accounting)),
    Addon(
        monitoring,
        lambda i: monitoring.objects(
            i.config, i.addresses, i.settings.monitoring, i.settings.cluster_autoscaler.max_total_unready_percentage
        ),
    ),
)
# Attribute of ``AddonsConfig`` -> its row's module, and -> its config key: views of the table.
MODULES = {addon.attr: addon.module for addon in ADDONS}
CONFIG_KEY = {addon.attr: addon.key for addon in ADDONS}


def parse_addon_settings(config: ClusterConfig, last_node_shards: int | None = None) -> AddonSettings:
    """Every add-on's settings (enabled or not, so a typo never waits for the day it is enabled).
    ``last_node_shards``: the node Prometheus shards the last deploy ran (``LastDeploy.monitoring_node_shards``)."""
    settings = {attr: module.parse(getattr(config.addons, attr).settings, config) for attr, module in MODULES.items()}
    settings["monitoring"] = monitoring.sized(settings["monitoring"], config, last_node_shards)
    _check_dependencies(config)
    return AddonSettings(**settings)


def _check_dependencies(config: ClusterConfig) -> None:
    """The add-on combinations the whole-cluster check lets through (both plan): each is refused here.
    GPU pools without the health check are the whole-cluster check's (nothing lifts their start-up
    taint; tests/infra/test_whole_cluster.py)."""
    addons = config.addons
    if config.production and not addons.monitoring.enabled:
        raise ConfigError(
            "addons.monitoring.enabled", False, "true while production is true (its alerts must page someone)"
        )
    if addons.node_local_dns.enabled and not addons.coredns.enabled:
        raise ConfigError(
            "addons.nodeLocalDns.enabled",
            True,
            "false while addons.coredns is disabled (NodeLocal DNS forwards cluster names to CoreDNS)",
        )
    if addons.balloons.enabled and not addons.cluster_autoscaler.enabled:
        raise ConfigError(
            "addons.balloons.enabled",
            True,
            "false while addons.clusterAutoscaler is disabled (balloons only make sense when pending pods add nodes)",
        )


def build_addon_objects(
    config: ClusterConfig,
    addresses: AddressPlan,
    settings: AddonSettings,
    azure: AzureAccess | None = None,
    node_kubernetes_version: str | None = None,
) -> dict[str, list[k8s.Obj]]:
    """``{"base": [...], "<enabled add-on>": [...]}``; ``azure`` is needed when the autoscaler is enabled.
    Each builder is handed only what it reads.
    ``node_kubernetes_version``: the release the nodes run (``ClusterSpec.node_kubernetes_version``,
    behind ``kubernetesVersion`` while the apiservers upgrade; infra/day2/deploy_rules.py), default
    ``kubernetesVersion``."""
    inputs = BuildInputs(config, addresses, settings, azure, node_kubernetes_version or config.kubernetes_version)
    groups = {BASE: base.objects(config)}
    for addon in ADDONS:
        if getattr(config.addons, addon.attr).enabled:
            groups[addon.attr] = addon.build(inputs)
    registry = naming.container_registry_login_server(config.cluster_name)
    for objs in groups.values():
        for obj in objs:
            for container in _containers(obj):
                container["image"] = images.in_cluster_registry(container["image"], registry)
    return groups


def _require(azure: AzureAccess | None) -> AzureAccess:
    if azure is None:
        raise ValueError("the cluster autoscaler needs AzureAccess (subscription, group, identity)")
    return azure


POD_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


def _containers(node: object) -> list[k8s.Obj]:
    """Every container of every pod template or pod spec inside ``node``, however deeply nested."""
    found: list[k8s.Obj] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in POD_CONTAINER_LISTS and isinstance(value, list):
                found += [c for c in value if isinstance(c, dict) and "image" in c]
            else:
                found += _containers(value)
    elif isinstance(node, list):
        for item in node:
            found += _containers(item)
    return found
