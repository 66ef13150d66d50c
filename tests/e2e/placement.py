"""Whether a DaemonSet is placed in the box: a pod of it bound on every booted node kind it is meant for.

Which kinds it is meant for is judged as the plan's whole-cluster check judges it
(``infra.cluster.whole_cluster.meant_for`` over ``infra.cluster.node_checks.node_kinds``, built from the objects the
box applied): its node selector and required affinity against the labels each kind's kubelet
registers. One pod somewhere is not enough: an agent that stops tolerating the GPU or NAT taint still
has pods on the CPU nodes. A pod counts once it is bound to a node of the kind (on a real node the
add-ons' images are not in the box, so their pods stay in ErrImagePull after they are placed).
"""

from __future__ import annotations

from typing import Any

from infra.cluster.node_checks import daemon_sets_of, kind_name, node_kinds
from infra.cluster.whole_cluster import NodeKind, Workload, meant_for
from tests.e2e.cluster import Cluster


def plan_node_kinds(cluster: Cluster) -> dict[str, NodeKind]:
    """The plan's node kinds by name, judged from the DaemonSets the box applied."""
    spec = cluster.spec
    objects = [("addons", document) for _, document in cluster.plan.kubernetes_objects()]
    kinds = node_kinds(spec.config, spec.addresses, spec.addons, daemon_sets_of(objects), spec.node_kubernetes_version)
    return {kind.name: kind for kind in kinds}


def kinds_without_a_pod(cluster: Cluster, daemon_set: dict[str, Any], kinds: dict[str, NodeKind]) -> list[str]:
    """The booted node kinds ``daemon_set`` is meant for on which no pod of it is bound."""
    booted: dict[str, set[str]] = {}
    for node in cluster.nodes:
        booted.setdefault(kind_name(node.pool), set()).add(node.machine.name)
    labels = daemon_set["spec"]["selector"]["matchLabels"]
    pods = cluster.get_json(
        "pods", "-n", daemon_set["metadata"]["namespace"], "-l", ",".join(f"{k}={v}" for k, v in labels.items())
    )["items"]
    bound = {p["spec"].get("nodeName") for p in pods}
    workload = Workload("", daemon_set)
    return sorted(name for name, nodes in booted.items() if meant_for(workload, kinds[name]) and not nodes & bound)


def unplaced(cluster: Cluster, *, running: bool, skip_namespaces: tuple[str, ...] = ()) -> list[str]:
    """Every Deployment, StatefulSet and DaemonSet of the plan (outside ``skip_namespaces``) whose pods are
    not all placed: a DaemonSet without a pod on a booted kind it is meant for, a Deployment or
    StatefulSet with fewer pods bound than its replicas. With ``running`` (nodes that run every pod, as
    nodesim reports them) each must also be available."""
    kinds = plan_node_kinds(cluster)
    problems = []
    for _, document in cluster.plan.kubernetes_objects():
        kind, meta = document["kind"], document["metadata"]
        if kind not in ("Deployment", "StatefulSet", "DaemonSet") or meta["namespace"] in skip_namespaces:
            continue
        name = f"{kind} {meta['namespace']}/{meta['name']}"
        live = cluster.get_json(kind.lower(), meta["name"], "-n", meta["namespace"])
        status = live["status"]
        if kind == "DaemonSet":
            missing = kinds_without_a_pod(cluster, document, kinds)
            available, wanted = status.get("numberAvailable", 0), status.get("desiredNumberScheduled", 0)
            if missing:
                problems.append(f"{name}: no pod bound on {', '.join(missing)}")
            elif running and available != wanted:
                problems.append(f"{name}: {available} of {wanted} pods bound and running")
            continue
        wanted = live["spec"]["replicas"]  # as the apiserver defaulted it
        if running:
            have = status.get("availableReplicas", 0)
        else:
            selector = ",".join(f"{k}={v}" for k, v in document["spec"]["selector"]["matchLabels"].items())
            pods = cluster.get_json("pods", "-n", meta["namespace"], "-l", selector)["items"]
            have = sum(1 for p in pods if p["spec"].get("nodeName"))
        if have < wanted:
            problems.append(f"{name}: {have} of {wanted} replicas {'bound and running' if running else 'bound'}")
    return problems
