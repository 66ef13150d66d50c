"""kube-controller-manager: leader-elected, no node CIDRs, fast enough for 7,500 nodes, and the CSR
signer and approver that let kubelets join by TLS bootstrapping."""

from __future__ import annotations

from infra.config.cluster_config import ClusterConfig
from infra.control_plane import leader_election, paths, pki
from infra.facts import ports
from infra.network.addressing import AddressPlan

# Client rate limits towards the apiserver (defaults 20/30 are far too low for thousands of nodes).
# The Azure large-cluster guide (aks-engine examples/largeclusters) runs 600/800.
KUBE_API_QPS = 600
KUBE_API_BURST = 800
# Batch Endpoints/EndpointSlice updates: one write per Service per 500 ms instead of one per pod
# change, as in the 5,000-node scale job (kops endpointUpdatesBatchPeriod / endpointSliceUpdatesBatchPeriod).
ENDPOINT_BATCH_PERIOD = "500ms"
# The default (kube-controller-manager --terminated-pod-gc-threshold), stated so CIS 1.3.1 is explicit.
TERMINATED_POD_GC_THRESHOLD = 12500
# Client certificates the CSR signer issues to kubelets: 30 days, so a node certificate taken from a machine
# lapses within a month. kubelet asks for a new one once 70 to 90 % of its life has passed (client-go
# certificate manager, nextRotationDeadline), so a running node renews with days to spare.
CLUSTER_SIGNING_DURATION = "720h"
# HTTPS port of /healthz and /metrics (its --secure-port default; the fact is in infra/facts/ports.py).
SECURE_PORT = ports.CONTROLLER_MANAGER


def controller_manager_flags(
    config: ClusterConfig, addresses: AddressPlan, bind_address: str
) -> dict[str, str | int | bool]:
    """``bind_address``: the apiserver VM's own private address (see ``--bind-address`` below)."""
    kubeconfig = paths.CONTROLLER_MANAGER_KUBECONFIG
    return {
        # Pods take VNet addresses from the NIC's secondary IP configurations, not node podCIDRs.
        "allocate-node-cidrs": False,
        # Delegated authentication and authorization (TokenReview, SubjectAccessReview): RBAC decides
        # who reads /metrics (Prometheus's ClusterRole grants get on that non-resource URL).
        "authentication-kubeconfig": kubeconfig,
        "authorization-kubeconfig": kubeconfig,
        # The secure port on the VM's own private address, for the control-plane Prometheus shard: a
        # deviation from CIS 1.3.7 (loopback), documented in docs/cis-benchmark.md. --bind-address
        # takes one IP; an unspecified one (0.0.0.0) would listen on every interface
        # (kube-controller-manager command-line reference; k8s.io/apiserver
        # pkg/server/options/serving.go). The apiserver subnet's NSG admits SECURE_PORT only from the
        # monitoring pools' subnets (infra/network/security_groups.py).
        "bind-address": bind_address,
        "cluster-name": config.cluster_name,
        # csrsigning signs; csrapproving approves only a node's renewal of its own client certificate (RBAC grants
        # no bootstrap token the nodeclient subresource: a new node's request is the attested approver's,
        # infra/control_plane/csr_approval.py); tokencleaner removes expired bootstrap tokens.
        "cluster-signing-cert-file": pki.cert_path(pki.CLUSTER_CA),
        "cluster-signing-key-file": pki.key_path(pki.CLUSTER_CA),
        "cluster-signing-duration": CLUSTER_SIGNING_DURATION,
        "controllers": "*,tokencleaner",
        "endpoint-updates-batch-period": ENDPOINT_BATCH_PERIOD,
        "endpointslice-updates-batch-period": ENDPOINT_BATCH_PERIOD,
        "kube-api-burst": KUBE_API_BURST,
        "kube-api-qps": KUBE_API_QPS,
        "kubeconfig": kubeconfig,
        "leader-elect": True,
        # Longer than upstream's, so that an etcd leader election does not cost the lease (leader_election.py).
        **leader_election.controller_manager_flags(),
        "profiling": False,
        "root-ca-file": pki.cert_path(pki.CLUSTER_CA),
        "service-account-private-key-file": pki.SERVICE_ACCOUNT_KEY,
        "service-cluster-ip-range": str(addresses.service_cidr),
        "terminated-pod-gc-threshold": TERMINATED_POD_GC_THRESHOLD,
        "use-service-account-credentials": True,
    }
