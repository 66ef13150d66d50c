"""Config rules that need what the plan renders for a node: its host ports and its pod budget.

Both read the rendered objects, never a second spelling of them: kubelet's and kube-proxy's
configs as every node receives them (``infra.node``), and the add-ons' DaemonSets as the cluster
receives them (``infra.addons``). ``infra.assembly.assemble`` runs them on the objects it built, so a
clash stops the program before any resource is declared, with one line naming the key.

- Host ports: kubelet, kube-proxy and every host-network add-on bind ports on the node; two on the
  same port means one of them cannot start (on every node at once).
- Pod budget: a pool's ``podIpsPerNode`` is also kubelet's ``maxPods`` (``infra.addressing``). The
  DaemonSet pods that land on each of the pool's nodes count against it, so it must leave room for
  at least one workload pod.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from infra import naming
from infra.addons import BASE, CONFIG_KEY
from infra.addons.k8s import Obj
from infra.addressing import AddressPlan
from infra.config import ADDON_KEYS, ClusterConfig, NodePoolConfig, Taint
from infra.errors import ConfigError
from infra.node import NodeSpec, kube_proxy, kubelet
from infra.node.pool import node_spec
from infra.sizing import shards

# KubeletConfiguration (kubelet.config.k8s.io/v1beta1) defaults for the ports our config leaves unset
# (kubernetes.io/docs/reference/config-api/kubelet-config.v1beta1: port 10250, healthzPort 10248).
KUBELET_DEFAULT_PORTS = {"port": 10250, "healthzPort": 10248}


def check_nodes(
    config: ClusterConfig, addresses: AddressPlan, addons: Mapping[str, list[Obj]], kubernetes_version: str
) -> None:
    """``addons``: every enabled add-on's objects, by group (``infra.addons.build_addon_objects``)."""
    daemonsets = list(_daemonsets(addons))
    for index, pool in enumerate(config.node_pools):
        # Every shard of a pool runs the same services (shards differ only in their InfiniBand domain).
        node = node_spec(
            config,
            addresses,
            pool,
            shards(pool)[0],
            kubernetes_version=kubernetes_version,
            vault_name=naming.key_vault(config.cluster_name),
            registry_login_server=naming.container_registry_login_server(config.cluster_name),
        )
        check_host_ports(config, node, daemonsets)
        check_pod_budget(index, pool, node, daemonsets)


def _daemonsets(addons: Mapping[str, list[Obj]]) -> Iterable[tuple[str, dict[str, Any]]]:
    """``(add-on config key, DaemonSet)`` of every enabled add-on."""
    for attr, objects in addons.items():
        for obj in objects:
            if obj.get("kind") == "DaemonSet":
                yield ("base" if attr == BASE else CONFIG_KEY[attr]), obj


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
    """Whether the scheduler would place this DaemonSet's pod on a node with these labels and taints:
    its nodeSelector and required node affinity match, and it tolerates every NoSchedule/NoExecute taint."""
    if any(labels.get(k) != v for k, v in (pod.get("nodeSelector") or {}).items()):
        return False
    required = ((pod.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if terms and not any(all(_matches(e, labels) for e in term.get("matchExpressions", [])) for term in terms):
        return False
    tolerations = pod.get("tolerations") or []
    return all(
        any(_tolerates(t, taint) for t in tolerations)
        for taint in taints
        if taint.effect in ("NoSchedule", "NoExecute")
    )


def _matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
    if operator == "In":
        return labels.get(key) in values
    if operator == "NotIn":
        return labels.get(key) not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    return False  # Gt/Lt: no add-on uses them; treat as not matching rather than guess


def _tolerates(toleration: Mapping[str, Any], taint: Taint) -> bool:
    if toleration.get("effect") not in (None, "", taint.effect):
        return False
    if toleration.get("operator") == "Exists":
        return toleration.get("key") in (None, "", taint.key)
    return toleration.get("key") == taint.key and toleration.get("value", "") == taint.value


def daemon_pods(node: NodeSpec, daemonsets: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The DaemonSets that put a pod on this node."""
    return [
        ds["metadata"]["name"]
        for _, ds in daemonsets
        if runs_on(ds["spec"]["template"]["spec"], node.labels, node.node_taints)
    ]


def check_pod_budget(
    index: int, pool: NodePoolConfig, node: NodeSpec, daemonsets: list[tuple[str, dict[str, Any]]]
) -> None:
    running = daemon_pods(node, daemonsets)
    needed = len(running) + 1
    if node.max_pods < needed:
        raise ConfigError(
            f"nodePools[{index}].podIpsPerNode",
            pool.pod_ips_per_node,
            f"at least {needed}: it is also kubelet's maxPods, and every {pool.name} node runs "
            f"{len(running)} DaemonSet pod(s) ({', '.join(running)}) before any workload",
        )
