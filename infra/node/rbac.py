"""The cluster RBAC a node needs to join and run kube-proxy, as plain Kubernetes objects.

TLS bootstrapping (kubernetes.io "TLS bootstrapping"): the bootstrap token's group
``system:bootstrappers`` may create CSRs, and kube-controller-manager auto-approves
a bootstrapper's first client CSR and every node's renewal. kube-proxy runs with the
node's own certificate (group ``system:nodes``), so that group gets the built-in
``system:node-proxier`` role. Applied by whoever holds the cluster's Kubernetes provider.
"""

from __future__ import annotations

BOOTSTRAPPERS = "system:bootstrappers"
NODES = "system:nodes"

# (binding name, built-in ClusterRole, group)
BINDINGS = (
    ("supercluster-node-bootstrapper", "system:node-bootstrapper", BOOTSTRAPPERS),
    ("supercluster-node-autoapprove-bootstrap",
     "system:certificates.k8s.io:certificatesigningrequests:nodeclient", BOOTSTRAPPERS),
    ("supercluster-node-autoapprove-renewal",
     "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", NODES),
    ("supercluster-node-proxier", "system:node-proxier", NODES),
)


def node_join_bindings() -> list[dict]:
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}],
        }
        for name, role, group in BINDINGS
    ]
