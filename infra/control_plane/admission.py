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
  pool is reserved for a team (docs/runbooks/team-isolation.md). No cluster-wide default: a namespace
  without the annotations is unaffected.
"""

from __future__ import annotations

import json
from typing import Any

from infra import yaml_text
from infra.config import ClusterConfig

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
