"""The RDMA shared device plugin: lets pods on InfiniBand nodes use the node's InfiniBand HCAs.

InfiniBand connects the VMs of one scale set (an "InfiniBand domain", ``infra.facts.labels``), and a pod
reaches the fabric only through the RDMA devices under ``/dev/infiniband``, which a container does
not get by default. The plugin (Mellanox/NVIDIA k8s-rdma-shared-dev-plugin) advertises them as the
extended resource ``infra.facts.labels.RDMA_RESOURCE``; a pod that requests one unit gets every
InfiniBand HCA of its node mounted (the devices are shared, up to ``rdmaHcaMax`` pods per node).

A DaemonSet on InfiniBand nodes only (``supercluster.io/infiniband=true``), tolerating every taint
like the NVIDIA device plugin (a node's devices must be advertised before the GPU health check's
verdict matters). It runs in the host network namespace, because it finds the HCAs through their
network devices (the ``linkTypes`` selector), privileged and with the host's ``/dev``, as the
plugin's own deployment does; ``kube-system`` is exempt from Pod Security for such node agents.

Tenant pods need no extra capability: the InfiniBand nodes' containerd lifts the memlock limit
(``infra.node.containerd.unit``), so RDMA can pin memory without IPC_LOCK, which Pod Security's
baseline level refuses (docs/infiniband-jobs.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from infra.addons import images, k8s
from infra.addons.settings import section
from infra.addons.shared_names import DEVICE_PLUGIN_DIR, NODE_CRITICAL, PLUGINS_REGISTRY_DIR, SYSTEM_NAMESPACE
from infra.config.cluster_config import ClusterConfig
from infra.facts.labels import INFINIBAND_LABEL, RDMA_RESOURCE

KEY = "rdmaDevicePlugin"
NAME = "rdma-shared-device-plugin"
CONFIG_MAP = "rdma-devices"
INFINIBAND_NODE_SELECTOR = {INFINIBAND_LABEL: "true"}
# The plugin reads its config from this directory (its deployment mounts the ConfigMap there).
CONFIG_DIR = "/k8s-rdma-shared-dev-plugin"
# The resource prefix the plugin registers under is "rdma"; the config names what follows the slash.
RESOURCE_PREFIX, RESOURCE_NAME = RDMA_RESOURCE.split("/")
# PCI vendor 15b3 is Mellanox (NVIDIA networking): the ConnectX-7 HCAs of the ND H100 v5 sizes
# (learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated/ndh100v5-series). Their accelerated
# networking NIC is a Mellanox virtual function too, but an Ethernet one: the link type tells them apart.
MELLANOX_VENDOR = "15b3"
INFINIBAND_LINK_TYPE = "infiniband"
DEFAULT_PODS_PER_NODE = 8  # one per GPU of an 8-GPU node: the most pods a whole-GPU job packs on one


@dataclass(frozen=True)
class Settings:
    pods_per_node: int  # rdmaHcaMax: how many pods of one node may share its HCAs


def parse(raw: Mapping[str, Any], config: ClusterConfig) -> Settings:
    s = section(KEY, raw)
    settings = Settings(pods_per_node=s.integer("podsPerNode", DEFAULT_PODS_PER_NODE, minimum=1, maximum=1000))
    s.done()
    return settings


def plugin_config(settings: Settings) -> dict[str, Any]:
    """The plugin's config.json: one shared resource holding every InfiniBand HCA of the node."""
    return {
        "configList": [
            {
                "resourceName": RESOURCE_NAME,
                "rdmaHcaMax": settings.pods_per_node,
                # Selectors are ANDed: Mellanox devices whose network device is an InfiniBand link.
                "selectors": {"vendors": [MELLANOX_VENDOR], "linkTypes": [INFINIBAND_LINK_TYPE]},
            }
        ]
    }


def objects(settings: Settings) -> list[k8s.Obj]:
    ns = SYSTEM_NAMESPACE
    container = {
        "name": NAME,
        "image": images.RDMA_SHARED_DEVICE_PLUGIN,
        "resources": k8s.resources("10m", "32Mi", "128Mi"),
        "securityContext": {"privileged": True},
        "volumeMounts": [
            {"name": "device-plugin", "mountPath": DEVICE_PLUGIN_DIR},
            {"name": "plugins-registry", "mountPath": PLUGINS_REGISTRY_DIR},
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "dev", "mountPath": "/dev"},
        ],
    }
    pod = k8s.pod_spec(
        [container],
        priority_class=NODE_CRITICAL,
        service_account=NAME,
        host_network=True,
        automountServiceAccountToken=False,
        nodeSelector=dict(INFINIBAND_NODE_SELECTOR),
        tolerations=k8s.tolerate_everything(),
        volumes=[
            {"name": "device-plugin", "hostPath": {"path": DEVICE_PLUGIN_DIR, "type": "Directory"}},
            {
                "name": "plugins-registry",
                "hostPath": {"path": PLUGINS_REGISTRY_DIR, "type": "DirectoryOrCreate"},
            },
            {
                "name": "config",
                "configMap": {"name": CONFIG_MAP, "items": [{"key": "config.json", "path": "config.json"}]},
            },
            {"name": "dev", "hostPath": {"path": "/dev", "type": "Directory"}},
        ],
    )
    return [
        k8s.service_account(NAME, ns, automount=False),
        k8s.config_map(CONFIG_MAP, ns, {"config.json": json.dumps(plugin_config(settings), indent=2)}, app=NAME),
        k8s.daemon_set(NAME, ns, pod, {"app.kubernetes.io/name": NAME}, 1, provides=[f"resource:{RDMA_RESOURCE}"]),
    ]
