"""The cluster as a whole, checked from what the plan renders before anything is declared.

Each config key is validated on its own elsewhere; this module catches the combinations of valid
values that plan a cluster that cannot work. It reads only rendered things: the Kubernetes objects
the add-ons apply (every Deployment, StatefulSet, DaemonSet and Service) and the node kinds the plan
boots (``NodeKind``: the labels and taints each kind's kubelet registers with, its allocatable and
``maxPods``, how many of it can exist). One mechanism answers every question, the scheduler's own
node-level predicates (``unmatched``, then requests and pod slots in ``_Node.why_not``):

- every Deployment and StatefulSet fits on some node kind that can have nodes: node selector, required
  node affinity, tolerations against taints, requests against what is left of allocatable once the
  DaemonSets on that kind are placed, and a pod slot under ``maxPods``; every DaemonSet has a pod on
  every node kind its selector picks (and fits there);
- every node kind can run the work it exists for (``NodeKind.work``: as many one-GPU pods as a GPU
  node has GPUs, one pod elsewhere) and reaches cluster DNS. What makes that possible is provided by
  DaemonSets, each declaring what it provides in the ``supercluster.io/provides`` annotation:
  ``resource:<name>`` (a device plugin advertising an extended resource: without it the kind's
  devices count as absent), ``lifts-taint:<key>`` (an agent that removes a start-up taint: without
  it the taint stays), ``dns:<address>`` (a node-local DNS cache bound to kubelet's clusterDNS); a
  Service whose clusterIP is kubelet's clusterDNS provides DNS when its pods fit somewhere. A new
  add-on or pool kind needs no new rule: it declares what it provides, or brings what it needs;
- declared capacity is reachable: a pool's ``minNodes`` equals its ``maxNodes``, or an autoscaler
  whose ``--node-group-auto-discovery`` matches its scale sets' tags owns it;
- the Node object kubelet registers passes the apiserver's validation (label and taint syntax, one
  taint per key and effect);
- the autoscaler's ``--max-node-provision-time`` is longer than the join time of every kind it owns
  (the plan's own estimate, ``infra/node/join_time.py``).

Each failure is a ``ConfigError``: one line naming the key, the value and what would work.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from infra.config.cluster_config import Taint
from infra.config.errors import ConfigError
from infra.facts.labels import PROVIDES_ANNOTATION

WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet")
# Kubernetes' taint effects (core/v1 TaintEffect) and the ones the scheduler enforces.
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
# kube-apiserver's Node validation (k8s.io/apimachinery validation.IsQualifiedName, IsValidLabelValue):
# a name of at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric, with an
# optional DNS-subdomain prefix of at most 253 characters.
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
# kubelet's default hard eviction threshold (KubeletConfiguration evictionHard, memory.available<100Mi):
# allocatable memory is the machine's less this (the rendered config reserves nothing else).
EVICTION_MEMORY_BYTES = 100 * 1024**2
_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


@dataclass(frozen=True)
class NodeKind:
    """One kind of node the plan boots (a pool, the NAT hosts), as its kubelet registers it."""

    name: str  # "pool gpu", "NAT hosts"
    key: str  # the config key that shapes it: "nodePools[0]", "network.natHosts"
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]  # registerWithTaints
    capacity: Mapping[str, int]  # cpu (millicores), memory (bytes) and device resources (count)
    max_pods: int  # kubelet's maxPods
    cluster_dns: str  # kubelet's clusterDNS
    max_nodes: int
    min_nodes: int = 0
    startup_taints: tuple[Taint, ...] = ()  # of ``taints``, the ones an agent lifts once the node is ready
    # The scale sets' tags, which the autoscaler discovers node groups by; None: fixed machines (VMs).
    scale_set_tags: Mapping[str, str] | None = None
    # What one workload pod of this kind requests, and how many must fit on one node.
    work: Mapping[str, int] = field(default_factory=dict)
    work_pods: int = 1
    join_seconds: int = 0  # the plan's estimate from scale-out to schedulable (infra/node/join_time.py)

    @property
    def can_have_nodes(self) -> bool:
        return self.max_nodes > 0


@dataclass(frozen=True)
class Workload:
    """A rendered object that runs pods, and the config key that owns it (``addons.coredns``)."""

    key: str
    obj: Mapping[str, Any]

    @property
    def kind(self) -> str:
        return str(self.obj["kind"])

    @property
    def name(self) -> str:
        meta = self.obj["metadata"]
        return f"{self.kind} {meta.get('namespace', '')}/{meta['name']}".replace(" /", " ")

    @property
    def pod(self) -> Mapping[str, Any]:
        spec: Mapping[str, Any] = self.obj["spec"]["template"]["spec"]
        return spec

    @property
    def provides(self) -> frozenset[str]:
        text = (self.obj["metadata"].get("annotations") or {}).get(PROVIDES_ANNOTATION, "")
        return frozenset(part.strip() for part in text.split(",") if part.strip())


def quantity(value: Any, resource: str) -> int:
    """A Kubernetes quantity as a whole number: CPU in millicores, anything else in its unit (bytes)."""
    text = str(value)
    scale = 1000 if resource == "cpu" else 1
    if text.endswith("m"):
        return int(float(text[:-1]) * scale / 1000)
    for suffix, factor in _UNITS.items():
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * factor * scale)
    return int(float(text) * scale)


def requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """What the scheduler reserves for a pod: its containers' requests summed, or the largest init
    container's where that is more (core/v1 effective requests); a limit stands in for a missing request."""
    total: dict[str, int] = {}
    for container in pod.get("containers") or []:
        for resource, value in _container_requests(container).items():
            total[resource] = total.get(resource, 0) + value
    for container in pod.get("initContainers") or []:
        for resource, value in _container_requests(container).items():
            total[resource] = max(total.get(resource, 0), value)
    return total


def _container_requests(container: Mapping[str, Any]) -> dict[str, int]:
    resources = container.get("resources") or {}
    asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {resource: quantity(value, resource) for resource, value in asked.items()}


# --------------------------------------------------------------------------- the scheduler's predicates


def unmatched(pod: Mapping[str, Any], labels: Mapping[str, str], taints: Iterable[Taint]) -> str | None:
    """Why the scheduler keeps this pod off a node with these labels and taints, resources aside (None: it
    may land): node selector, required node affinity, and every NoSchedule/NoExecute taint."""
    for key, value in (pod.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return f"nodeSelector {key}={value} (its nodes have {key}={labels.get(key, '<none>')})"
    required = ((pod.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if terms and not any(all(_matches(e, labels) for e in t.get("matchExpressions") or []) for t in terms):
        return "its required node affinity"
    tolerations = pod.get("tolerations") or []
    for taint in taints:
        if taint.effect in BLOCKING_EFFECTS and not any(tolerates(t, taint) for t in tolerations):
            return f"taint {taint.key}={taint.value}:{taint.effect} not tolerated"
    return None


def _matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
    if operator == "In":
        return labels.get(key) in values
    if operator == "NotIn":
        return labels.get(key) not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    if operator in ("Gt", "Lt") and key in labels and labels[key].isdigit():
        number, bound = int(labels[key]), int(values[0])
        return number > bound if operator == "Gt" else number < bound
    return False


def tolerates(toleration: Mapping[str, Any], taint: Taint) -> bool:
    if toleration.get("effect") not in (None, "", taint.effect):
        return False
    if toleration.get("operator") == "Exists":
        return toleration.get("key") in (None, "", taint.key)
    return toleration.get("key") == taint.key and toleration.get("value", "") == taint.value


@dataclass
class _Node:
    """A node of one kind once its DaemonSets are placed: what they leave, and what they provide."""

    kind: NodeKind
    daemon_sets: list[Workload]
    free: dict[str, int]
    free_pods: int
    provided: frozenset[str]

    def lasting_taints(self) -> list[Taint]:
        return [t for t in self.kind.taints if f"lifts-taint:{t.key}" not in self.provided]

    def why_not(self, pod: Mapping[str, Any], pods: int = 1) -> str | None:
        """Why ``pods`` copies of ``pod`` cannot all run on one node of this kind (None: they can)."""
        reason = unmatched(pod, self.kind.labels, self.lasting_taints())
        if reason is not None:
            return reason
        if self.free_pods < pods:
            return f"maxPods {self.kind.max_pods} leaves {self.free_pods} pod slot(s) after its DaemonSets"
        for resource, amount in requests(pod).items():
            if amount * pods > self.free.get(resource, 0):
                have = self.free.get(resource, 0)
                return f"{pods} x {resource} {_shown(resource, amount)} > {_shown(resource, have)} left of allocatable"
        return None


def _shown(resource: str, amount: int) -> str:
    if resource == "cpu":
        return f"{amount}m"
    if resource == "memory" or resource.endswith("storage"):
        return f"{amount / 2**30:.1f}Gi"
    return str(amount)


def _place(kind: NodeKind, daemon_sets: Sequence[Workload]) -> _Node:
    """A node of ``kind`` with every DaemonSet that lands there (they tolerate start-up taints: agents
    run before the node is ready). Device resources count only once a DaemonSet advertises them."""
    landing = [d for d in daemon_sets if unmatched(d.pod, kind.labels, kind.taints) is None]
    provided = frozenset(p for d in landing for p in d.provides)
    free = {
        resource: amount
        for resource, amount in kind.capacity.items()
        if resource in ("cpu", "memory") or f"resource:{resource}" in provided
    }
    for daemon_set in landing:
        for resource, amount in requests(daemon_set.pod).items():
            free[resource] = free.get(resource, 0) - amount
    return _Node(kind, landing, free, kind.max_pods - len(landing), provided)


# --------------------------------------------------------------------------- the check


def check_cluster(
    workloads: Sequence[Workload], services: Sequence[Mapping[str, Any]], kinds: Sequence[NodeKind]
) -> None:
    """Raises the first ``ConfigError`` of: Node validation, reachable capacity, DaemonSets that do not
    fit the nodes they land on, workloads with no node kind, node kinds that cannot run their work or
    resolve names, and a provision timeout shorter than a join."""
    for kind in kinds:
        check_node_object(kind)
    check_capacity_reachable(workloads, kinds)
    live = [kind for kind in kinds if kind.can_have_nodes]
    daemon_sets = [w for w in workloads if w.kind == "DaemonSet"]
    nodes = [_place(kind, daemon_sets) for kind in live]
    for node in nodes:
        for resource, left in node.free.items():
            if left < 0:
                raise ConfigError(
                    node.kind.key,
                    node.kind.name,
                    f"room for the DaemonSets that land on it: they request {_shown(resource, -left)} more "
                    f"{resource} than its allocatable ({', '.join(d.name for d in node.daemon_sets)})",
                )
        if node.free_pods < 0:
            raise ConfigError(
                node.kind.key, node.kind.name, f"a maxPods above its {len(node.daemon_sets)} DaemonSet pods"
            )
    for workload in workloads:
        _check_placed(workload, nodes)
    for node in nodes:
        _check_work(node)
        _check_dns(node, nodes, workloads, services)
    check_provision_time(workloads, live)


def meant_for(daemon_set: Workload, kind: NodeKind) -> bool:
    """Whether a DaemonSet is meant for a kind of node: its node selector and required affinity pick it
    (taints aside: not tolerating one is a DaemonSet that misses nodes it is meant for)."""
    return unmatched(daemon_set.pod, kind.labels, ()) is None


def _check_placed(workload: Workload, nodes: Sequence[_Node]) -> None:
    """A Deployment or StatefulSet fits some node kind; a DaemonSet lands on every kind it is meant for (one
    meant for none, a GPU agent in a CPU-only cluster, runs nowhere and harms nothing)."""
    if workload.kind == "DaemonSet":
        for node in nodes:
            if meant_for(workload, node.kind) and workload not in node.daemon_sets:
                reason = unmatched(workload.pod, node.kind.labels, node.kind.taints)
                raise ConfigError(
                    workload.key,
                    workload.name,
                    f"a pod on every node kind its selector picks: {node.kind.name} ({node.kind.key}) gets none "
                    f"({reason}); tolerate that taint, or take it off the pool",
                )
        return
    else:
        reasons = {node.kind.name: node.why_not(workload.pod) for node in nodes}
        if any(reason is None for reason in reasons.values()):
            return
    why = "; ".join(f"{name}: {reason}" for name, reason in reasons.items()) or "the plan boots no node"
    raise ConfigError(
        workload.key,
        workload.name,
        f"a node kind it fits, e.g. a pool without taints it does not tolerate (none fits: {why})",
    )


def _check_work(node: _Node) -> None:
    """The kind runs what it exists for: ``work_pods`` pods each asking ``work``, tolerating the taints
    the config put on the kind on purpose (start-up taints must be lifted by an agent)."""
    kind = node.kind
    meant = [t for t in kind.taints if t.effect in BLOCKING_EFFECTS and not _is_startup(t, kind)]
    pod = {
        "nodeSelector": {},
        "tolerations": [{"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect} for t in meant],
        "containers": [{"resources": {"requests": dict(kind.work)}}],
    }
    reason = node.why_not(pod, kind.work_pods)
    if reason is None:
        return
    missing = [
        f"resource:{r}" for r in kind.work if r not in ("cpu", "memory") and f"resource:{r}" not in node.provided
    ]
    missing += [f"lifts-taint:{t.key}" for t in node.lasting_taints() if _is_startup(t, kind)]
    need = f"a DaemonSet providing {' and '.join(missing)} on its nodes" if missing else "room for them"
    asked = ", ".join(f"{r}: {a}" for r, a in kind.work.items()) or "nothing"
    raise ConfigError(kind.key, kind.name, f"{need}: {kind.work_pods} workload pod(s) ({asked}) cannot run ({reason})")


def _is_startup(taint: Taint, kind: NodeKind) -> bool:
    """A taint the node registers with that no workload is meant to tolerate: one an agent lifts."""
    return taint in kind.startup_taints


def _check_dns(
    node: _Node, nodes: Sequence[_Node], workloads: Sequence[Workload], services: Sequence[Mapping[str, Any]]
) -> None:
    address = node.kind.cluster_dns
    if f"dns:{address}" in node.provided:
        return
    for service in services:
        spec = service.get("spec") or {}
        if spec.get("clusterIP") != address:
            continue
        selector = spec.get("selector") or {}
        for workload in workloads:
            labels = ((workload.obj["spec"]["template"].get("metadata") or {}).get("labels")) or {}
            matched = selector and all(labels.get(k) == v for k, v in selector.items())
            if matched and any(other.why_not(workload.pod) is None for other in nodes):
                return
    raise ConfigError(
        node.kind.key,
        node.kind.name,
        f"working cluster DNS at kubelet's clusterDNS {address}: a DaemonSet providing dns:{address} on its "
        "nodes, or a Service with that clusterIP whose pods fit some node (addons.coredns, addons.nodeLocalDns)",
    )


# --------------------------------------------------------------------------- capacity and timing


def _flags(workload: Workload) -> list[str]:
    """Every ``--name=value`` argument the workload's containers start with (command and args)."""
    return [
        arg
        for container in workload.pod.get("containers") or []
        for arg in [*(container.get("command") or []), *(container.get("args") or [])]
        if isinstance(arg, str) and arg.startswith("--")
    ]


def autoscaler_discovery(workloads: Sequence[Workload]) -> list[tuple[Workload, dict[str, str]]]:
    """``(workload, tags)`` for each ``--node-group-auto-discovery=label:k=v,...`` a container runs with
    (cluster-autoscaler's flag: it manages every scale set carrying all of those tags)."""
    prefix = "--node-group-auto-discovery=label:"
    return [
        (workload, dict(pair.split("=", 1) for pair in flag.removeprefix(prefix).split(",") if "=" in pair))
        for workload in workloads
        for flag in _flags(workload)
        if flag.startswith(prefix)
    ]


def check_capacity_reachable(workloads: Sequence[Workload], kinds: Sequence[NodeKind]) -> None:
    """Nodes past ``minNodes`` come only from an autoscaler that owns the kind's scale sets: without one,
    ``maxNodes`` (what the summary counts) is capacity that never arrives."""
    discovery = autoscaler_discovery(workloads)
    for kind in kinds:
        tags = kind.scale_set_tags
        if tags is None or kind.min_nodes >= kind.max_nodes:
            continue
        if not any(all(tags.get(k) == v for k, v in wanted.items()) for _, wanted in discovery):
            raise ConfigError(
                f"{kind.key}.minNodes",
                kind.min_nodes,
                f"{kind.max_nodes} (its maxNodes), or an autoscaler that owns the pool (addons.clusterAutoscaler): "
                f"with neither, {kind.max_nodes - kind.min_nodes} of its declared nodes never arrive",
            )


def check_provision_time(workloads: Sequence[Workload], kinds: Sequence[NodeKind]) -> None:
    """The autoscaler gives up on a node it added (and deletes it) after ``--max-node-provision-time``: a
    kind it owns that takes longer to join would be created and deleted for ever."""
    prefix = "--max-node-provision-time="
    for workload, wanted in autoscaler_discovery(workloads):
        owned = [k for k in kinds if k.scale_set_tags and all(k.scale_set_tags.get(a) == b for a, b in wanted.items())]
        slowest = max(owned, key=lambda k: k.join_seconds, default=None)
        for flag in _flags(workload):
            value = flag.removeprefix(prefix)
            if flag.startswith(prefix) and slowest is not None and duration_seconds(value) <= slowest.join_seconds:
                raise ConfigError(
                    "addons.clusterAutoscaler.maxNodeProvisionTime",
                    value,
                    f"more than {slowest.name}'s join time, {slowest.join_seconds} s by the plan's own estimate "
                    "(infra/node/join_time.py): the autoscaler would delete each new node before it is ready",
                )


def duration_seconds(text: str) -> int:
    """A Go duration (``20m``, ``1h30m``, ``90s``) in whole seconds."""
    units = {"h": 3600, "m": 60, "s": 1}
    return sum(int(number) * units[unit] for number, unit in re.findall(r"([0-9]+)([hms])", text))


# --------------------------------------------------------------------------- the Node object


def check_node_object(kind: NodeKind) -> None:
    """The labels and taints kubelet registers pass the apiserver's Node validation: otherwise no node of
    the kind ever registers."""
    for key, value in kind.labels.items():
        if not is_qualified_name(key):
            raise ConfigError(f"{kind.key}.labels", key, "a label key: [prefix/]name, name 63 characters at most")
        if not is_label_value(value):
            raise ConfigError(f"{kind.key}.labels.{key}", value, "a label value: 63 characters at most")
    seen: set[tuple[str, str]] = set()
    for taint in kind.taints:
        if not is_qualified_name(taint.key):
            raise ConfigError(f"{kind.key}.taints", taint.key, "a taint key: [prefix/]name, name 63 characters at most")
        if not is_label_value(taint.value):
            raise ConfigError(f"{kind.key}.taints", taint.value, "a taint value: 63 characters at most")
        if taint.effect not in TAINT_EFFECTS:
            raise ConfigError(f"{kind.key}.taints", taint.effect, "one of " + ", ".join(TAINT_EFFECTS))
        if (taint.key, taint.effect) in seen:
            raise ConfigError(
                f"{kind.key}.taints",
                f"{taint.key}:{taint.effect}",
                "each key and effect once (Node validation refuses a duplicate: no node of the pool would register)",
            )
        seen.add((taint.key, taint.effect))


def is_qualified_name(text: str) -> bool:
    prefix, _, name = text.rpartition("/")
    if "/" in text and (not prefix or len(prefix) > 253 or not re.fullmatch(_SUBDOMAIN, prefix, re.ASCII)):
        return False
    return re.fullmatch(_NAME, name, re.ASCII) is not None


def is_label_value(text: str) -> bool:
    return text == "" or re.fullmatch(_NAME, text, re.ASCII) is not None
