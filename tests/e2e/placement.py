"""Whether a DaemonSet is placed in the box: a pod running on every booted node kind it is meant for.

Which kinds it is meant for is judged as the plan judges it (``infra.whole_cluster.meant_for`` over
``infra.node_checks.node_kinds``): its node selector and required affinity against the labels each
pool's kubelet registers. One pod somewhere is not enough: an agent that stops tolerating the GPU or
NAT taint still has pods on the CPU nodes.
"""

from __future__ import annotations

from typing import Any

from infra.node_checks import kind_name, node_kinds
from infra.whole_cluster import Workload, meant_for
from tests.e2e.cluster import Cluster


def kinds_without_a_pod(cluster: Cluster, daemon_set: dict[str, Any]) -> list[str]:
    """The booted node kinds ``daemon_set`` is meant for on which no pod of it runs."""
    spec = cluster.spec
    planned = [("", d) for _, d in cluster.plan.kubernetes_objects() if d["kind"] == "DaemonSet"]
    kinds = {
        kind.name: kind
        for kind in node_kinds(spec.config, spec.addresses, spec.addons, planned, spec.node_kubernetes_version)
    }
    booted: dict[str, set[str]] = {}
    for node in cluster.nodes:
        booted.setdefault(kind_name(node.pool), set()).add(node.machine.name)
    labels = daemon_set["spec"]["selector"]["matchLabels"]
    pods = cluster.get_json(
        "pods", "-n", daemon_set["metadata"]["namespace"], "-l", ",".join(f"{k}={v}" for k, v in labels.items())
    )["items"]
    running = {p["spec"].get("nodeName") for p in pods if p.get("status", {}).get("phase") == "Running"}
    workload = Workload("", daemon_set)
    return sorted(name for name, nodes in booted.items() if meant_for(workload, kinds[name]) and not nodes & running)
