"""Config rules that need what the plan renders for a node: its host ports and its pod budget.

Both read the rendered objects, never a second spelling of them: kubelet's and kube-proxy's
configs as every node receives them (``infra.node``), and the add-ons' DaemonSets as the cluster
receives them (``infra.addons``). ``infra.assembly.desired_cluster.assemble`` runs them on the objects it built, so a
clash stops the program before any resource is declared, with one line naming the key.

- Host ports: kubelet, kube-proxy and every host-network add-on bind ports on the node; two on the
  same port means one of them cannot start (on every node at once).
- Pod budget: a pool's ``podIpsPerNode`` covers the DaemonSet pods that take a pod IP on its nodes and
  its workload pods (one per GPU on a GPU node); kubelet's ``maxPods`` is ``podIpsPerNode`` plus the
  host-network DaemonSet pods, which count against it but take no IP.
- The cluster as a whole (``infra.cluster.whole_cluster``), from the same objects and the node kinds built here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from infra.addons import BASE, CONFIG_KEY, AddonSettings
from infra.addons.k8s import Obj
from infra.catalog.vm_sizes import VM_SIZES, VmSize
from infra.cluster.whole_cluster import (
    EVICTION_MEMORY_BYTES,
    WORKLOAD_KINDS,
    NodeKind,
    Workload,
    check_cluster,
    unmatched,
)
from infra.config import naming
from infra.config.cluster_config import ADDON_KEYS, ClusterConfig, NodePoolConfig, Taint
from infra.config.errors import ConfigError
from infra.config.sizing import shards
from infra.facts.labels import GPU_RESOURCE, KUBELET_LABELS, RDMA_RESOURCE
from infra.nat_hosts import NAT_HOST_LABELS, NAT_HOST_MAX_PODS, NAT_HOST_TAINTS
from infra.network.addressing import AddressPlan, pod_ip_configurations
from infra.node import NodeSpec, gpu, join_time, kube_proxy, kubelet
from infra.node.pool import autoscaler_tags, node_spec

# KubeletConfiguration (kubelet.config.k8s.io/v1beta1) defaults for the ports our config leaves unset
# (kubernetes.io/docs/reference/config-api/kubelet-config.v1beta1: port 10250, healthzPort 10248).
KUBELET_DEFAULT_PORTS = {"port": 10250, "healthzPort": 10248}


def check_nodes(
    config: ClusterConfig,
    addresses: AddressPlan,
    settings: AddonSettings,
    addons: Mapping[str, list[Obj]],
    kubernetes_version: str,
) -> dict[str, int]:
    """Runs every check on what the nodes and add-ons render; ``addons``: every enabled add-on's objects, by
    group (``infra.addons.build_addon_objects``). Returns each pool's host-network DaemonSet pods
    (``node_spec``'s ``host_network_pods``: kubelet's maxPods is the pod IPs plus them)."""
    objects = owned_objects(addons)
    daemonsets = daemon_sets_of(objects)
    host_network = {}
    for index, pool in enumerate(config.node_pools):
        # Every shard of a pool runs the same services (shards differ only in their InfiniBand domain).
        node = pool_node(config, addresses, pool, daemonsets, kubernetes_version)
        host_network[pool.name] = node.max_pods - pod_ip_configurations(pool)
        check_host_ports(config, node, daemonsets)
        check_pod_budget(index, pool, node, daemonsets)
    check_cluster(
        [Workload(key, obj) for key, obj in objects if obj.get("kind") in WORKLOAD_KINDS],
        [obj for _, obj in objects if obj.get("kind") == "Service"],
        node_kinds(config, addresses, settings, daemonsets, kubernetes_version),
    )
    return host_network


def pool_node(
    config: ClusterConfig,
    addresses: AddressPlan,
    pool: NodePoolConfig,
    daemonsets: list[tuple[str, dict[str, Any]]],
    kubernetes_version: str,
) -> NodeSpec:
    """A node of the pool's first shard, its maxPods counting the host-network DaemonSet pods that land there
    (which DaemonSets land depends only on labels and taints, not on maxPods)."""

    def node(host_network_pods: int) -> NodeSpec:
        return node_spec(
            config,
            addresses,
            pool,
            shards(pool)[0],
            kubernetes_version=kubernetes_version,
            vault_name=naming.key_vault(config.cluster_name),
            registry_login_server=naming.container_registry_login_server(config.cluster_name),
            host_network_pods=host_network_pods,
        )

    landing = [ds for _, ds in daemonsets if _lands(ds, node(0))]
    return node(sum(1 for ds in landing if _host_network(ds)))


def _lands(daemonset: Mapping[str, Any], node: NodeSpec) -> bool:
    return runs_on(daemonset["spec"]["template"]["spec"], node.labels, node.node_taints)


def workload_pods(pool: NodePoolConfig) -> int:
    """Workload pods one node of the pool must fit: one per GPU on a GPU node (a researcher's 8 one-GPU pods
    on an 8-GPU node), else at least one."""
    return max(1, pool.size.gpus)


def owned_objects(addons: Mapping[str, list[Obj]]) -> list[tuple[str, dict[str, Any]]]:
    """``(owning config key, object)`` for every object of the add-on groups (``addons`` for the base)."""
    return [
        ("addons" if attr == BASE else f"addons.{CONFIG_KEY[attr]}", obj)
        for attr, objects in addons.items()
        for obj in objects
    ]


def node_kinds(
    config: ClusterConfig,
    addresses: AddressPlan,
    settings: AddonSettings,
    daemonsets: list[tuple[str, dict[str, Any]]],
    kubernetes_version: str,
) -> list[NodeKind]:
    """Every kind of node the plan boots, as its kubelet registers it: one per pool, and the NAT hosts.
    ``daemonsets``: ``(owner, DaemonSet)`` of what the cluster applies (``daemon_sets_of``)."""
    kinds = []
    for index, pool in enumerate(config.node_pools):
        shard = shards(pool)[0]
        node = pool_node(config, addresses, pool, daemonsets, kubernetes_version)
        devices = {GPU_RESOURCE: pool.size.gpus} if pool.size.gpus else {}
        if pool.infiniband:
            devices[RDMA_RESOURCE] = settings.rdma_device_plugin.pods_per_node
        kinds.append(
            NodeKind(
                name=kind_name(pool.name),
                key=f"nodePools[{index}]",
                labels={**node.labels, **KUBELET_LABELS},
                taints=node.node_taints,
                startup_taints=(gpu.UNHEALTHY_TAINT,) if pool.size.gpus else (),
                capacity={**machine_capacity(pool.size), **devices},
                max_pods=node.max_pods,
                cluster_dns=node.cluster_dns,
                max_nodes=0 if pool.retired else pool.max_nodes,
                min_nodes=0 if pool.retired else pool.min_nodes,
                scale_set_tags=autoscaler_tags(config, pool, shard),
                # A GPU node exists to run one pod per GPU (each with an HCA share on InfiniBand).
                work={resource: 1 for resource in devices},
                work_pods=workload_pods(pool),
                join_seconds=join_time.total_seconds(gpu=pool.size.gpus > 0),
            )
        )
    nat = config.network.nat_hosts
    kinds.append(
        NodeKind(
            name=kind_name(None),
            key="network.natHosts",
            labels={**NAT_HOST_LABELS, **KUBELET_LABELS},
            taints=NAT_HOST_TAINTS,
            capacity=machine_capacity(VM_SIZES[nat.vm_size]),
            max_pods=NAT_HOST_MAX_PODS,
            cluster_dns=addresses.dns_service_ip,
            max_nodes=nat.count,
            min_nodes=nat.count,
            work_pods=0,  # they forward; no workload runs there
        )
    )
    return kinds


def kind_name(pool: str | None) -> str:
    """A node kind's name: ``pool <name>``, or the NAT hosts' (``pool`` None)."""
    return "NAT hosts" if pool is None else f"pool {pool}"


def machine_capacity(size: VmSize) -> dict[str, int]:
    """What a machine of ``size`` offers pods: its vCPUs and its memory less kubelet's eviction threshold."""
    return {"cpu": size.vcpus * 1000, "memory": size.memory_gib * 2**30 - EVICTION_MEMORY_BYTES}


def _daemonsets(addons: Mapping[str, list[Obj]]) -> list[tuple[str, dict[str, Any]]]:
    """``(add-on config key, DaemonSet)`` of every enabled add-on."""
    return daemon_sets_of(owned_objects(addons))


def daemon_sets_of(objects: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("base" if key == "addons" else key.removeprefix("addons."), obj)
        for key, obj in objects
        if obj.get("kind") == "DaemonSet"
    ]


def _port_of(bind_address: str) -> int:
    return int(bind_address.rsplit(":", 1)[1])


def host_ports(node: NodeSpec, daemonsets: list[tuple[str, dict[str, Any]]]) -> dict[int, list[str]]:
    """``{port: [who binds it]}`` on a node: kubelet and kube-proxy from their rendered configs, and
    the host ports of the DaemonSets that run there (host network: every container and probe port)."""
    used: dict[int, list[str]] = {}

    def claim(port: int, owner: str) -> None:
        if owner not in used.setdefault(port, []):
            used[port].append(owner)

    rendered = kubelet.config(cluster_dns=node.cluster_dns, max_pods=node.max_pods, taints=node.node_taints)
    for field, default in KUBELET_DEFAULT_PORTS.items():
        claim(int(rendered.get(field, default)), "kubelet")
    proxy = kube_proxy.config(node.cluster_cidr)
    for field in ("healthzBindAddress", "metricsBindAddress"):
        claim(_port_of(proxy[field]), "kube-proxy")
    for addon, daemonset in daemonsets:
        pod = daemonset["spec"]["template"]["spec"]
        if not runs_on(pod, node.labels, node.node_taints):
            continue
        owner = f"addons.{addon} ({daemonset['metadata']['name']})"
        for container in pod.get("containers", []):
            for port in container.get("ports", []):
                if pod.get("hostNetwork"):
                    claim(int(port["containerPort"]), owner)
                elif "hostPort" in port:
                    claim(int(port["hostPort"]), owner)
            if pod.get("hostNetwork"):
                for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                    action = container.get(probe, {})
                    for kind in ("httpGet", "tcpSocket"):
                        if isinstance(action.get(kind, {}).get("port"), int):
                            claim(action[kind]["port"], owner)
    return used


def check_host_ports(config: ClusterConfig, node: NodeSpec, daemonsets: list[tuple[str, dict[str, Any]]]) -> None:
    """Two services on one port: blamed on the add-on whose port the config sets, else the first add-on."""
    for port, owners in sorted(host_ports(node, daemonsets).items()):
        if len(owners) < 2:
            continue
        addons = [o for o in owners if o.startswith("addons.")]
        configured = [o for o in addons if "port" in _settings(config, o)]
        blamed = (configured or addons or owners)[0]
        addon = blamed.split(" ", 1)[0]
        key, value = (f"{addon}.port", port) if configured else (f"{addon}.enabled", True)
        others = ", ".join(o for o in owners if o != blamed)
        raise ConfigError(key, value, f"a host port no other node service binds ({port} is also {others}'s)")


def _settings(config: ClusterConfig, owner: str) -> Mapping[str, Any]:
    attr = ADDON_KEYS.get(owner.split(" ", 1)[0].removeprefix("addons."))
    return getattr(config.addons, attr).settings if attr else {}


def runs_on(pod: Mapping[str, Any], labels: Mapping[str, str], taints: Iterable[Taint]) -> bool:
    """Whether the scheduler would place this DaemonSet's pod on a node with these labels and taints."""
    return unmatched(pod, labels, taints) is None


def daemon_pods(node: NodeSpec, daemonsets: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The DaemonSets that put a pod on this node."""
    return [ds["metadata"]["name"] for _, ds in daemonsets if _lands(ds, node)]


def check_pod_budget(
    index: int, pool: NodePoolConfig, node: NodeSpec, daemonsets: list[tuple[str, dict[str, Any]]]
) -> None:
    """The pool's pod IPs cover the DaemonSet pods that need one (not host network) and its workload pods."""
    with_ip = [ds["metadata"]["name"] for _, ds in daemonsets if _lands(ds, node) and not _host_network(ds)]
    needed = len(with_ip) + workload_pods(pool)
    if pod_ip_configurations(pool) < needed:
        listed = f" ({', '.join(with_ip)})" if with_ip else ""
        raise ConfigError(
            f"nodePools[{index}].podIpsPerNode",
            pool.pod_ips_per_node,
            f"at least {needed}: every {pool.name} node runs {len(with_ip)} DaemonSet pod(s) that take a pod IP"
            f"{listed} and {workload_pods(pool)} workload pod(s){' (one per GPU)' if pool.size.gpus else ''}; "
            "host-network DaemonSet pods take none",
        )


def _host_network(daemonset: Mapping[str, Any]) -> bool:
    return bool(daemonset["spec"]["template"]["spec"].get("hostNetwork"))
