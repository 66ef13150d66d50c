"""Small constructors for the Kubernetes objects the add-ons render, so every object has one shape.

``pod_spec`` is the only way a pod template is built: it enforces the rule that a pod on
the host network resolves cluster names (``dnsPolicy: ClusterFirstWithHostNet``; with
``ClusterFirst`` kubelet silently falls back to the node's resolver,
kubernetes.io/docs/concepts/services-networking/dns-pod-service/#pod-s-dns-policy).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from infra.facts.labels import (
    PROVIDES_ANNOTATION,
    ROLE_LABEL,
    ROLE_SYSTEM,
    SYSTEM_TAINT_EFFECT,
    SYSTEM_TAINT_KEY,
    SYSTEM_TAINT_VALUE,
)

PART_OF = "supercluster"

Obj = dict[str, Any]


def labels(app: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    return {"app.kubernetes.io/name": app, "app.kubernetes.io/part-of": PART_OF, **(extra or {})}


def metadata(
    name: str,
    namespace: str | None = None,
    app: str | None = None,
    extra_labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> Obj:
    meta: Obj = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = labels(app or name, extra_labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


# Pod Security Admission's namespace label (kubernetes.io/docs/concepts/security/pod-security-admission).
POD_SECURITY_ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
# The seccomp profile the restricted level requires of every pod (or each of its containers).
RUNTIME_DEFAULT_SECCOMP = {"seccompProfile": {"type": "RuntimeDefault"}}


def namespace(name: str, pod_security: str, annotations: Mapping[str, str] | None = None) -> Obj:
    """An add-on namespace states the Pod Security level its pods pass (``restricted`` or ``baseline``),
    so it never rests on the cluster default and a pod that loosens its own context is refused."""
    meta = metadata(name, annotations=annotations)
    meta["labels"][POD_SECURITY_ENFORCE_LABEL] = pod_security
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def service_account(name: str, ns: str, automount: bool = True) -> Obj:
    account: Obj = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata(name, ns)}
    if not automount:
        account["automountServiceAccountToken"] = False
    return account


def rule(
    api_groups: Iterable[str],
    resources: Iterable[str],
    verbs: Iterable[str],
    resource_names: Iterable[str] | None = None,
) -> Obj:
    result: Obj = {"apiGroups": list(api_groups), "resources": list(resources), "verbs": list(verbs)}
    if resource_names is not None:
        result["resourceNames"] = list(resource_names)
    return result


def cluster_role(name: str, rules: list[Obj], app: str | None = None) -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": metadata(name, app=app),
        "rules": rules,
    }


def role(name: str, ns: str, rules: list[Obj], app: str | None = None) -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(name, ns, app=app),
        "rules": rules,
    }


def binding(
    kind: str,
    name: str,
    role_kind: str,
    role_name: str,
    account: str,
    account_ns: str,
    ns: str | None = None,
    app: str | None = None,
) -> Obj:
    """A ClusterRoleBinding (``ns`` None) or RoleBinding of ``role_name`` to one service account."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": metadata(name, ns, app=app),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": account_ns}],
    }


def config_map(name: str, ns: str, data: Mapping[str, str], app: str | None = None) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata(name, ns, app=app), "data": dict(data)}


def pod_spec(
    containers: list[Obj],
    *,
    priority_class: str,
    service_account: str | None = None,
    host_network: bool = False,
    dns_policy: str | None = None,
    **fields: Any,
) -> Obj:
    """A PodSpec; host-network pods always get ``ClusterFirstWithHostNet``."""
    spec: Obj = {}
    if service_account is not None:
        spec["serviceAccountName"] = service_account
    if host_network:
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    elif dns_policy is not None:
        spec["dnsPolicy"] = dns_policy
    spec["priorityClassName"] = priority_class
    spec.update(fields)
    spec["containers"] = containers
    return spec


def on_system_pool() -> Obj:
    """``pod_spec`` fields that put a pod on the tainted system pools (``ROLE_SYSTEM``), where tenants never
    land: for the add-ons that hold a cloud identity or see the whole cluster (docs/security.md)."""
    return {
        "nodeSelector": {ROLE_LABEL: ROLE_SYSTEM},
        "tolerations": [
            {"key": SYSTEM_TAINT_KEY, "operator": "Equal", "value": SYSTEM_TAINT_VALUE, "effect": SYSTEM_TAINT_EFFECT}
        ],
    }


def template(app: str, spec: Obj, match_labels: Mapping[str, str], annotations: Mapping[str, str] | None = None) -> Obj:
    meta: Obj = {"labels": {**labels(app), **match_labels}}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"metadata": meta, "spec": spec}


def deployment(
    name: str,
    ns: str,
    replicas: int | None,
    pod: Obj,
    match_labels: Mapping[str, str],
    strategy: Obj | None = None,
    annotations: Mapping[str, str] | None = None,
    pod_annotations: Mapping[str, str] | None = None,
    app: str | None = None,
) -> Obj:
    """``replicas`` None leaves the count to someone else (an autoscaler): a re-apply never resets it."""
    spec: Obj = {} if replicas is None else {"replicas": replicas}
    spec["selector"] = {"matchLabels": dict(match_labels)}
    if strategy is not None:
        spec["strategy"] = strategy
    spec["template"] = template(app or name, pod, match_labels, pod_annotations)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(name, ns, app=app, annotations=annotations),
        "spec": spec,
    }


def daemon_set(
    name: str,
    ns: str,
    pod: Obj,
    match_labels: Mapping[str, str],
    max_unavailable: str | int,
    app: str | None = None,
    provides: Sequence[str] = (),
) -> Obj:
    """``provides``: what the agent gives each node it runs on (``resource:<name>``, ``lifts-taint:<key>``,
    ``dns:<address>``), read by the plan's whole-cluster check (infra/cluster/whole_cluster.py)."""
    annotations = {PROVIDES_ANNOTATION: ",".join(provides)} if provides else None
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": metadata(name, ns, app=app, annotations=annotations),
        "spec": {
            "selector": {"matchLabels": dict(match_labels)},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": max_unavailable}},
            "template": template(app or name, pod, match_labels),
        },
    }


def resources(cpu: str, memory: str, memory_limit: str | None = None, extra: Mapping[str, Any] | None = None) -> Obj:
    """Requests, and a memory limit (CPU is never limited: throttling a DNS or API client hurts more)."""
    requests: Obj = {"cpu": cpu, "memory": memory, **(extra or {})}
    limits: Obj = {"memory": memory_limit or memory, **(extra or {})}
    return {"requests": requests, "limits": limits}


def tolerate_everything() -> list[Obj]:
    """Node agents run on every node they select, whatever the node's taints."""
    return [{"operator": "Exists"}]


def locked_down(*add_capabilities: str, as_nobody: bool = True, read_only_root: bool = True) -> Obj:
    """A container security context that drops every capability it does not name; ``as_nobody``
    runs it as uid 65534 (False keeps the image's own user, for images that need root)."""
    context: Obj = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], **({"add": list(add_capabilities)} if add_capabilities else {})},
        "readOnlyRootFilesystem": read_only_root,
    }
    if as_nobody:
        context.update({"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534})
    return context


def object_key(obj: Obj) -> tuple[str, str, str]:
    """``(kind, namespace or "", name)``: what identifies an object in the cluster."""
    meta = obj["metadata"]
    return obj["kind"], meta.get("namespace", ""), meta["name"]


def pod_templates(objects: Iterable[Obj]) -> list[tuple[Obj, Obj]]:
    """``(workload, pod spec)`` for every Deployment and DaemonSet."""
    return [(obj, obj["spec"]["template"]["spec"]) for obj in objects if obj["kind"] in ("Deployment", "DaemonSet")]
