"""What the apiserver admits: Pod Security for every namespace, and the team-pool namespace defaults.

Rendered into ``--admission-control-config-file`` (``AdmissionConfiguration``), beside the
plugins added to the default-on set in ``--enable-admission-plugins``:

- **PodSecurity** (on by default since 1.25): every namespace enforces ``baseline`` unless it says
  otherwise, so a tenant pod cannot be privileged, share the host's network, PID or IPC namespace,
  or mount a host path: the ways out of a pod onto its node (and the node's identity through the
  metadata service). ``restricted`` is audited and warned about, so teams see what tightening would
  break. Only ``kube-system`` is exempt: the node agents there (NodeLocal DNS, the device plugin,
  the traffic-accounting exporter) need the host.
- **PodNodeSelector** and **PodTolerationRestriction**: a namespace's annotations give its pods a
  node selector and default tolerations and bound the tolerations they may carry, which is how a
  pool is reserved for a team (docs/runbooks/team-isolation.md).
- **Tenant policies** (``tenant_policies``, ValidatingAdmissionPolicies applied with the cluster's
  objects): in every namespace but the platform's, no ``spec.nodeName`` or binding by anyone but the
  scheduler, no toleration of the platform's taints (or of a team's outside a team namespace), no
  platform priority.
- **Node labels** (``node_labels_policy``): a kubelet may register or relabel its Node only with the labels
  the program renders for the pool its name belongs to, so no node (a real one escaped into, or one
  registered with the bootstrap token) claims another pool's or team's labels.
- **The bootstrap-token minter** (``token_minter_policy``): its identity creates no Secret but an expiring
  bootstrap token of the nodes' group, and no Lease but its own.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from infra.addons.shared_names import (
    CLUSTER_CRITICAL,
    MONITORING_NAMESPACE,
    NODE_CRITICAL,
    SYSTEM_NAMESPACE,
    SYSTEM_PRIORITY,
)
from infra.boot import yaml_text
from infra.config.cluster_config import ClusterConfig
from infra.config.naming import COMPUTER_NAME_SUFFIX_CHARS
from infra.control_plane import pki, token_minting
from infra.control_plane.flowcontrol import NODES_GROUP
from infra.facts.labels import GPU_STARTUP_TAINT_KEY, NAT_HOST_TAINT_KEY, SYSTEM_TAINT_KEY

# Added to the default-on plugins (NamespaceLifecycle, ServiceAccount, PodSecurity, ... stay on):
# NodeRestriction limits each kubelet to its own Node and Pods; DenyServiceExternalIPs closes
# CVE-2020-8554; the last two apply a namespace's node selector and toleration annotations.
PLUGINS = ("DenyServiceExternalIPs", "NodeRestriction", "PodNodeSelector", "PodTolerationRestriction")
DEFAULT_ENFORCE = "baseline"
DEFAULT_AUDIT_AND_WARN = "restricted"
EXEMPT_NAMESPACES = ("kube-system",)
# The namespace annotations the two team-pool plugins read (k8s.io/kubernetes plugin/pkg/admission).
NODE_SELECTOR_ANNOTATION = "scheduler.alpha.kubernetes.io/node-selector"
DEFAULT_TOLERATIONS_ANNOTATION = "scheduler.alpha.kubernetes.io/defaultTolerations"
TOLERATIONS_WHITELIST_ANNOTATION = "scheduler.alpha.kubernetes.io/tolerationsWhitelist"


TEAM_TAINT_KEY = "supercluster.io/team"  # the team-pool runbook's taint and label key
# Tolerations the apiserver itself adds to pods, which a namespace's whitelist must allow or it
# refuses every pod: DefaultTolerationSeconds adds not-ready and unreachable (NoExecute, 300 s), and
# PodTolerationRestriction adds memory-pressure to every pod that is not BestEffort.
ADDED_BY_ADMISSION = tuple(
    {"key": key, "operator": "Exists", "effect": effect}
    for key, effect in (
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    )
)


def team_namespace(name: str, team: str) -> dict[str, Any]:
    """A namespace whose pods all land on the pool reserved for ``team`` (tainted and labelled
    ``supercluster.io/team=<team>``) and may tolerate nothing else: docs/runbooks/team-isolation.md."""
    toleration = {"key": TEAM_TAINT_KEY, "operator": "Equal", "value": team, "effect": "NoSchedule"}
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "annotations": {
                DEFAULT_TOLERATIONS_ANNOTATION: json.dumps([toleration], separators=(",", ":")),
                TOLERATIONS_WHITELIST_ANNOTATION: json.dumps([toleration, *ADDED_BY_ADMISSION], separators=(",", ":")),
                NODE_SELECTOR_ANNOTATION: f"{TEAM_TAINT_KEY}={team}",
            },
        },
    }


def pod_security_version(config: ClusterConfig) -> str:
    """The policy version the levels are judged by: the cluster's own minor, so an upgrade never
    tightens what is admitted before the team has seen the warnings."""
    return "v" + ".".join(config.kubernetes_version.split(".")[:2])


def admission_configuration(config: ClusterConfig) -> str:
    version = pod_security_version(config)
    document = {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AdmissionConfiguration",
        "plugins": [
            {
                "name": "PodSecurity",
                "configuration": {
                    "apiVersion": "pod-security.admission.config.k8s.io/v1",
                    "kind": "PodSecurityConfiguration",
                    "defaults": {
                        "enforce": DEFAULT_ENFORCE,
                        "enforce-version": version,
                        "audit": DEFAULT_AUDIT_AND_WARN,
                        "audit-version": version,
                        "warn": DEFAULT_AUDIT_AND_WARN,
                        "warn-version": version,
                    },
                    "exemptions": {"usernames": [], "runtimeClasses": [], "namespaces": list(EXEMPT_NAMESPACES)},
                },
            },
            {
                "name": "PodTolerationRestriction",
                "configuration": {
                    "apiVersion": "podtolerationrestriction.admission.k8s.io/v1alpha1",
                    "kind": "Configuration",
                    "default": [],  # no cluster-wide default tolerations
                    "whitelist": [],  # no cluster-wide bound: only annotated namespaces are restricted
                },
            },
            # PodNodeSelector's own format; no cluster default selector, namespaces annotate their own.
            {
                "name": "PodNodeSelector",
                "configuration": {"podNodeSelectorPluginConfig": {"clusterDefaultNodeSelector": ""}},
            },
        ],
    }
    return yaml_text.dump(document, sort_keys=False)


# ------------------------------------------------------------------------------ tenant pods

# Where the platform's own pods run; every other namespace is a tenant's. Matched by the
# ``kubernetes.io/metadata.name`` label, which the apiserver sets to the namespace's name and nobody can change.
PLATFORM_NAMESPACES = (SYSTEM_NAMESPACE, MONITORING_NAMESPACE, "kube-public", "kube-node-lease")
# Taints only platform pods may tolerate: the system pools (cloud identities, monitoring), the NAT hosts and
# GPU nodes not yet proven healthy.
PLATFORM_TAINTS = (SYSTEM_TAINT_KEY, NAT_HOST_TAINT_KEY, GPU_STARTUP_TAINT_KEY)
# Priorities that preempt other teams' work: ours and the two built-in critical classes, which since
# Kubernetes 1.17 any namespace may name (kubernetes.io/docs/concepts/scheduling-eviction/pod-priority-preemption).
PLATFORM_PRIORITIES = (SYSTEM_PRIORITY, CLUSTER_CRITICAL, NODE_CRITICAL)
TENANT_PODS_POLICY = "supercluster-tenant-pods"
TENANT_BINDINGS_POLICY = "supercluster-tenant-bindings"


def _cel_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def _policy(
    name: str,
    resources: list[str],
    operations: list[str],
    validations: list[dict[str, str]],
    *,
    tenants_only: bool = True,
    conditions: tuple[dict[str, str], ...] = (),
    variables: tuple[dict[str, str], ...] = (),
) -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy and its Deny binding; ``tenants_only`` binds it in tenant namespaces only."""
    spec: dict[str, Any] = {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {"apiGroups": [""], "apiVersions": ["v1"], "operations": operations, "resources": resources}
            ]
        },
    }
    if conditions:
        spec["matchConditions"] = list(conditions)
    if variables:
        spec["variables"] = list(variables)
    spec["validations"] = validations
    binding: dict[str, Any] = {"policyName": name, "validationActions": ["Deny"]}
    if tenants_only:
        binding["matchResources"] = {
            "namespaceSelector": {
                "matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(PLATFORM_NAMESPACES)}
                ]
            }
        }
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": spec,
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": binding,
        },
    ]


def tenant_policies() -> list[dict[str, Any]]:
    """What a tenant namespace's pod may not do, whoever creates it (system:masters included):

    - name its node (``spec.nodeName``) or be bound by anyone but the scheduler (``pods/binding``): both skip
      the scheduler, and kubelet re-checks only NoExecute taints, so either would land it on a NAT host, a
      system node or another team's pool;
    - tolerate every taint (an empty key with ``Exists``), a platform taint (``PLATFORM_TAINTS``), or a team's
      taint outside a team namespace (there ``PodTolerationRestriction``'s whitelist decides the value);
    - use a platform priority (``PLATFORM_PRIORITIES``), which would preempt other teams' jobs.

    A policy, not the plugin's cluster-wide whitelist: that whitelist is replaced, not narrowed, by a
    namespace's own annotation, and the namespaces where platform pods tolerate everything (``kube-system``)
    exist before the program does."""
    tolerations = "(has(object.spec.tolerations) ? object.spec.tolerations : [])"
    team_namespace = (
        "(has(namespaceObject.metadata.annotations) && "
        f"'{TOLERATIONS_WHITELIST_ANNOTATION}' in namespaceObject.metadata.annotations)"
    )
    pods = [
        {
            "expression": "request.operation != 'CREATE' || !has(object.spec.nodeName) || object.spec.nodeName == ''",
            "message": "a tenant pod may not name its node (spec.nodeName): the scheduler places it",
        },
        {
            "expression": f"{tolerations}.all(t, has(t.key) && t.key != '')",
            "message": "a tenant pod may not tolerate every taint (a toleration needs a key)",
        },
        {
            "expression": f"{tolerations}.all(t, !has(t.key) || !(t.key in {_cel_list(PLATFORM_TAINTS)}))",
            "message": f"a tenant pod may not tolerate the platform's taints {', '.join(PLATFORM_TAINTS)}",
        },
        {
            "expression": f"{tolerations}.all(t, !has(t.key) || t.key != '{TEAM_TAINT_KEY}') || {team_namespace}",
            "message": f"only a team namespace's pods may tolerate {TEAM_TAINT_KEY} (docs/runbooks/team-isolation.md)",
        },
        {
            "expression": "!has(object.spec.priorityClassName) || "
            f"!(object.spec.priorityClassName in {_cel_list(PLATFORM_PRIORITIES)})",
            "message": f"a tenant pod may not use the platform's priority classes {', '.join(PLATFORM_PRIORITIES)}",
        },
    ]
    bindings = [
        {
            "expression": f"request.userInfo.username == '{pki.SCHEDULER_USER}'",
            "message": "only the scheduler binds a tenant's pods to nodes",
        }
    ]
    return [
        *_policy(TENANT_PODS_POLICY, ["pods"], ["CREATE", "UPDATE"], pods),
        # Both ways to bind: POST .../pods/<name>/binding (the scheduler's) and POST .../bindings.
        *_policy(TENANT_BINDINGS_POLICY, ["pods/binding", "bindings"], ["CREATE"], bindings),
    ]


# ------------------------------------------------------------------------------ node labels

NODE_LABELS_POLICY = "supercluster-node-labels"
# Every label under it is the platform's (infra/facts/labels.py, the team label of docs/runbooks/team-isolation.md).
PLATFORM_LABEL_PREFIX = "supercluster.io/"


def _cel_map(values: Mapping[str, Mapping[str, str]]) -> str:
    return "{" + ", ".join(f"'{k}': " + "{" + ", ".join(f"'{lk}': '{lv}'" for lk, lv in sorted(v.items())) + "}"
                           for k, v in sorted(values.items())) + "}"  # fmt: skip


def node_labels_policy(
    by_prefix: Mapping[str, Mapping[str, str]], by_name: Mapping[str, Mapping[str, str]]
) -> list[dict[str, Any]]:
    """What a kubelet may label its own Node with: the labels rendered for the machine its name names.

    A node's pool and team labels are what steer pods to it (the team namespaces' node selector, every
    pool's), and NodeRestriction lets a kubelet set any label outside the ``kubernetes.io`` namespaces on its
    own Node. So root on any node (its own kubelet credentials) or a holder of the bootstrap token (a node
    certificate under a name of its choosing) could label a Node with another pool's or team's labels and
    draw that team's pods, with their Secrets. Keyed on the node's identity: the Node is its own
    (NodeRestriction), and its name is the VM's host name, a scale set's computer-name prefix
    (``by_prefix``: the labels its kubelet's ``--node-labels`` renders) plus Azure's six characters, or a NAT
    host's name (``by_name``). A guarded label (any under ``supercluster.io/``, and any key a machine
    renders) must be what that machine renders; one already on the Node (an operator's) may stay. Only
    ``system:nodes`` is judged: operators and controllers label as before. Both ``nodes`` and
    ``nodes/status``: an update of the status subresource keeps the labels it is sent."""
    guarded = sorted({key for labels in (*by_prefix.values(), *by_name.values()) for key in labels})
    name = "object.metadata.name"
    prefix = f"{name}.substring(0, {name}.size() - {COMPUTER_NAME_SUFFIX_CHARS})"
    expected = (
        f"{name} in variables.byName ? variables.byName[{name}] : "
        f"({name}.size() > {COMPUTER_NAME_SUFFIX_CHARS} && {prefix} in variables.byPrefix ? "
        f"variables.byPrefix[{prefix}] : {{}})"
    )
    old = "request.operation == 'UPDATE' && has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}"
    guard = f"(k.startsWith('{PLATFORM_LABEL_PREFIX}') || k in {_cel_list(tuple(guarded))})"
    kept = "(k in variables.old && variables.old[k] == variables.labels[k])"
    rendered = "(k in variables.expected && variables.expected[k] == variables.labels[k])"
    return _policy(
        NODE_LABELS_POLICY,
        ["nodes", "nodes/status"],
        ["CREATE", "UPDATE"],
        [
            {
                "expression": "variables.refused.size() == 0",
                "messageExpression": f"'a node may carry only the labels rendered for its pool: ' + {name} + "
                "' may not set ' + variables.refused.map(k, k + '=' + variables.labels[k]).join(', ')",
            }
        ],
        tenants_only=False,
        conditions=({"name": "kubelets-only", "expression": f"'{NODES_GROUP}' in request.userInfo.groups"},),
        variables=(
            {"name": "byPrefix", "expression": _cel_map(by_prefix)},
            {"name": "byName", "expression": _cel_map(by_name)},
            {"name": "expected", "expression": expected},
            {"name": "old", "expression": old},
            {"name": "labels", "expression": "has(object.metadata.labels) ? object.metadata.labels : {}"},
            {"name": "refused", "expression": f"variables.labels.filter(k, {guard} && !{kept} && !{rendered})"},
        ),
    )


# ------------------------------------------------------------------------------ the bootstrap-token minter

TOKEN_MINTER_POLICY = "supercluster-bootstrap-token-minter"


def _token_having(*keys: str) -> str:
    """Guards an expression that reads these data keys (a missing one would be an evaluation error, not a denial
    with the policy's message)."""
    return "has(object.data) && " + " && ".join(f"'{k}' in object.data" for k in keys)


def token_minter_policy() -> list[dict[str, Any]]:
    """What the bootstrap-token minter (infra/control_plane/token_minting.py) may create or update, whatever RBAC
    allows it: a Secret only if it is a bootstrap token whose keys are exactly a minted token's
    (``token_minting.minted_token_keys``: an ``expiration`` among them), of the nodes' group and no other, for
    authentication only (never signing); a Lease only if it is its own. So its credential cannot make a
    service-account token, or any Secret a workload reads, nor a token that never expires.

    The apiserver hands the policy a Secret's ``data`` as the base64 text of the API (``stringData`` is merged
    into it first; the object is converted to unstructured JSON, ``objectToResolveVal`` in k8s.io/apiserver
    pkg/admission/plugin/cel), and its CEL has no base64 decoder (no ``ext.Encoders`` in its environment,
    pkg/cel/environment/base.go), so the fixed values are compared as base64 (``string()`` keeps the text), and
    the expiration's value, which would need decoding to be read as a time, is required but not bounded: the
    minter sets it ``LIFETIME_SECONDS`` ahead (tests/infra/test_token_minting.py). Its credential lives on the
    apiservers, which hold the cluster CA key: a bound would not stop whoever holds it."""
    fixed = {k: v for k, v in token_minting.bootstrap_token_fixed_data().items() if k != "description"}
    allowed_keys = token_minting.minted_token_keys()
    keys = "[" + ", ".join(f"'{k}'" for k in allowed_keys) + "]"
    is_secret = "request.resource.resource == 'secrets'"
    as_base64 = {k: base64.b64encode(v.encode()).decode() for k, v in fixed.items()}  # as the API returns []byte
    secret_checks = [
        (
            f"object.type == '{token_minting.BOOTSTRAP_TOKEN_TYPE}'",
            f"the token minter creates only Secrets of type {token_minting.BOOTSTRAP_TOKEN_TYPE}",
        ),
        (
            f"{_token_having(*allowed_keys)} && object.data.all(k, k in {keys})",
            f"a minted token has exactly the keys {', '.join(allowed_keys)}",
        ),
        (
            " && ".join(
                [_token_having(*fixed), *(f"string(object.data['{k}']) == '{v}'" for k, v in as_base64.items())]
            ),
            "a minted token authenticates (never signs) and only as the nodes' group " + fixed["auth-extra-groups"],
        ),
    ]
    validations = [
        {"expression": f"!({is_secret}) || ({expression})", "message": message} for expression, message in secret_checks
    ] + [
        {
            "expression": f"request.resource.resource != 'leases' || object.metadata.name == '{token_minting.LEASE}'",
            "message": f"the token minter's only Lease is {token_minting.LEASE}",
        }
    ]
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": TOKEN_MINTER_POLICY},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["secrets"],
                        },
                        {
                            "apiGroups": ["coordination.k8s.io"],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["leases"],
                        },
                    ]
                },
                "matchConditions": [
                    {
                        "name": "token-minter-only",
                        "expression": f"request.userInfo.username == '{pki.TOKEN_MINTER_USER}'",
                    }
                ],
                "validations": validations,
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": TOKEN_MINTER_POLICY},
            "spec": {"policyName": TOKEN_MINTER_POLICY, "validationActions": ["Deny"]},
        },
    ]
