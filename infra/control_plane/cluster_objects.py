"""What Pulumi applies inside the cluster once an apiserver answers: node join, RBAC, CRD, APF.

Node join: the node's boot program authenticates with the bootstrap token and creates the CSR for its
client certificate with Azure's attested proof of the machine (infra/node/join.py); the approver on every
apiserver approves it only when that proof names the node (infra/control_plane/csr_approval.py), and
kube-controller-manager's csrsigning signs it with the cluster CA. The token's group may create CSRs, and no
more: it is not granted the ``nodeclient`` subresource, so the controller-manager's csrapproving never
approves a request sent with it. No one is granted ``selfnodeclient`` either: a node's renewal of its own
certificate is the approver's too, approved only while Azure still has the node's VM.
"""

from __future__ import annotations

from typing import Any

from infra.config import naming
from infra.config.cluster_config import ClusterConfig
from infra.config.sizing import shards
from infra.control_plane import admission, csr_approval, flowcontrol, pki, token_minting
from infra.control_plane.csr_approval import KUBELET_SERVING_SIGNER
from infra.control_plane.scheduler import POD_GROUP_LABEL
from infra.facts import attestation
from infra.nat_hosts import NAT_HOST_LABELS
from infra.node.pool import pool_labels

RBAC = "rbac.authorization.k8s.io"
BOOTSTRAP_GROUP = attestation.BOOTSTRAP_GROUP
POD_GROUP_API_GROUP = "scheduling.x-k8s.io"


def _binding(name: str, role: str, subject_kind: str, subject: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": RBAC, "kind": subject_kind, "name": subject}],
    }


def node_join_rbac() -> list[dict[str, Any]]:
    return [
        _binding("supercluster:node-bootstrapper", "system:node-bootstrapper", "Group", BOOTSTRAP_GROUP),
        # kube-proxy runs on every node with the node's own certificate (infra/node/kube_proxy.py).
        _binding("supercluster:node-proxier", "system:node-proxier", "Group", "system:nodes"),
        # kubectl logs/exec/port-forward: the apiserver's client identity towards kubelets.
        _binding("supercluster:apiserver-kubelet-client", "system:kubelet-api-admin", "User", pki.KUBELET_CLIENT_USER),
    ]


CSR_APPROVER_ROLE = "supercluster:csr-approver"
COORDINATION = "coordination.k8s.io"
CERTIFICATES = "certificates.k8s.io"


def csr_approver_rbac() -> list[dict[str, Any]]:
    """The node certificates' approver's (infra/control_plane/csr_approval.py): read requests and Nodes, and
    approve or deny for its two signers (kubelet serving, kubelet client): the approval subresource's ``update``
    and ``approve`` on each signer by name (kubernetes.io "Certificate Signing Requests", "Authorization"). No
    create, no delete, no other signer."""
    role = {
        "apiVersion": f"{RBAC}/v1",
        "kind": "ClusterRole",
        "metadata": {"name": CSR_APPROVER_ROLE},
        "rules": [
            {
                "apiGroups": [CERTIFICATES],
                "resources": ["certificatesigningrequests"],
                "verbs": ["get", "list", "watch"],
            },
            {"apiGroups": [CERTIFICATES], "resources": ["certificatesigningrequests/approval"], "verbs": ["update"]},
            {
                "apiGroups": [CERTIFICATES],
                "resources": ["signers"],
                "resourceNames": [KUBELET_SERVING_SIGNER, attestation.KUBELET_CLIENT_SIGNER],
                "verbs": ["approve"],
            },
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        ],
    }
    lease_role = {
        "apiVersion": f"{RBAC}/v1",
        "kind": "Role",
        "metadata": {"name": CSR_APPROVER_ROLE, "namespace": csr_approval.LEASE_NAMESPACE},
        "rules": [
            {
                "apiGroups": [COORDINATION],
                "resources": ["leases"],
                "resourceNames": [csr_approval.LEASE],
                "verbs": ["get", "update"],
            }
        ],
    }
    return [
        role,
        _binding(CSR_APPROVER_ROLE, CSR_APPROVER_ROLE, "User", pki.CSR_APPROVER_USER),
        lease_role,
        _role_binding(csr_approval.LEASE_NAMESPACE, CSR_APPROVER_ROLE, pki.CSR_APPROVER_USER),
        csr_approver_lease(),
    ]


def csr_approver_lease() -> dict[str, Any]:
    """The approvers' Lease, declared here without a holder (the copies write its spec), so no approver needs the
    right to create a Lease."""
    return {
        "apiVersion": f"{COORDINATION}/v1",
        "kind": "Lease",
        "metadata": {"name": csr_approval.LEASE, "namespace": csr_approval.LEASE_NAMESPACE},
    }


MINTER_ROLE = "supercluster:bootstrap-token-minter"


def token_minter_rbac() -> list[dict[str, Any]]:
    """The bootstrap-token minter's (infra/control_plane/token_minting.py), in kube-system only: create Secrets
    and Leases, get and update its own Lease by name; no read of any Secret, no delete. RBAC cannot narrow a
    create by type or name: ``admission.token_minter_policy`` does."""
    namespace = token_minting.BOOTSTRAP_TOKEN_NAMESPACE
    role = {
        "apiVersion": f"{RBAC}/v1",
        "kind": "Role",
        "metadata": {"name": MINTER_ROLE, "namespace": namespace},
        "rules": [
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
            {"apiGroups": [COORDINATION], "resources": ["leases"], "verbs": ["create"]},
            {
                "apiGroups": [COORDINATION],
                "resources": ["leases"],
                "resourceNames": [token_minting.LEASE],
                "verbs": ["get", "update"],
            },
        ],
    }
    return [role, _role_binding(namespace, MINTER_ROLE, pki.TOKEN_MINTER_USER)]


def _role_binding(namespace: str, role: str, user: str) -> dict[str, Any]:
    """Binds the Role ``role`` of ``namespace`` (and the binding has its name) to one user."""
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": "RoleBinding",
        "metadata": {"name": role, "namespace": namespace},
        "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": role},
        "subjects": [{"apiGroup": RBAC, "kind": "User", "name": user}],
    }


def pod_group_crd() -> dict[str, Any]:
    """PodGroup (scheduling.x-k8s.io/v1alpha1), the API the Coscheduling plugin reads; schema per
    kubernetes-sigs/scheduler-plugins apis/scheduling/v1alpha1."""
    count = {"type": "integer", "format": "int32"}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"podgroups.{POD_GROUP_API_GROUP}",
            "annotations": {
                "api-approved.kubernetes.io": "https://github.com/kubernetes-sigs/scheduler-plugins/pull/50"
            },
        },
        "spec": {
            "group": POD_GROUP_API_GROUP,
            "names": {
                "kind": "PodGroup",
                "listKind": "PodGroupList",
                "plural": "podgroups",
                "singular": "podgroup",
                "shortNames": ["pg", "pgs"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                        {"name": "MinMember", "type": "integer", "jsonPath": ".spec.minMember"},
                        {"name": "Running", "type": "integer", "jsonPath": ".status.running"},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": f"Pods labelled {POD_GROUP_LABEL}=<name> and scheduled by the "
                            "gang-scheduler profile start together once minMember of them fit.",
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": {
                                    "type": "object",
                                    "properties": {
                                        "minMember": {**count, "minimum": 1},
                                        "minResources": {
                                            "type": "object",
                                            "additionalProperties": {
                                                "anyOf": [{"type": "integer"}, {"type": "string"}],
                                                "x-kubernetes-int-or-string": True,
                                            },
                                        },
                                        "scheduleTimeoutSeconds": count,
                                    },
                                },
                                "status": {
                                    "type": "object",
                                    "properties": {
                                        "phase": {"type": "string"},
                                        "occupiedBy": {"type": "string"},
                                        "running": count,
                                        "succeeded": count,
                                        "failed": count,
                                        "scheduleStartTime": {"type": "string", "format": "date-time"},
                                    },
                                },
                            },
                        }
                    },
                }
            ],
        },
    }


def gang_scheduling_rbac() -> list[dict[str, Any]]:
    """The scheduler runs as system:kube-scheduler, whose built-in role knows nothing of PodGroups."""
    role = {
        "apiVersion": f"{RBAC}/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "supercluster:gang-scheduler"},
        "rules": [{"apiGroups": [POD_GROUP_API_GROUP], "resources": ["podgroups"], "verbs": ["get", "list", "watch"]}],
    }
    return [role, _binding("supercluster:gang-scheduler", "supercluster:gang-scheduler", "User", pki.SCHEDULER_USER)]


def rendered_node_labels(config: ClusterConfig) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]]:
    """The labels each machine's kubelet registers with (``--node-labels``, from the same functions the node
    renderers call): by scale-set computer-name prefix (every shard, retired ones too: their nodes may still
    run), and by NAT host name."""
    by_prefix = {
        naming.computer_name_prefix(shard.name): pool_labels(config, pool, shard)
        for pool in config.node_pools
        for shard in shards(pool)
    }
    by_name = {
        naming.nat_host(config.cluster_name, index): dict(NAT_HOST_LABELS)
        for index in range(config.network.nat_hosts.count)
    }
    return by_prefix, by_name


def cluster_objects(config: ClusterConfig) -> list[dict[str, Any]]:
    """Every non-secret object, in apply order (the CRD before anything could use it)."""
    return [
        *node_join_rbac(),
        *csr_approver_rbac(),
        *token_minter_rbac(),
        pod_group_crd(),
        *gang_scheduling_rbac(),
        *flowcontrol.objects(),
        *admission.tenant_policies(),
        *admission.node_labels_policy(*rendered_node_labels(config)),
        *admission.token_minter_policy(),
    ]
