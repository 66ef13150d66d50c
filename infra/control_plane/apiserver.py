"""kube-apiserver: flags and the files next to them (audit policy, authentication, encryption; admission
in ``infra.control_plane.admission``).

Sources for every large-cluster value are named where it is set; the table in
docs/cis-benchmark.md maps each CIS Kubernetes Benchmark 1.2 check to the flag below.
"""

from __future__ import annotations

from collections.abc import Mapping

from infra.boot import yaml_text
from infra.config.cluster_config import ClusterConfig, PeopleSignInConfig
from infra.control_plane import admission, paths, people_sign_in, pki
from infra.facts import ports
from infra.network.addressing import CLUSTER_DOMAIN, AddressPlan

SERVICE_ACCOUNT_ISSUER = f"https://kubernetes.default.svc.{CLUSTER_DOMAIN}"
HEALTH_PATHS = ("/healthz", "/livez", "/readyz")

# Concurrency per apiserver. With API Priority and Fairness on (the default), the two limits are
# summed into the server's total seats (kubernetes/apiserver server_run_options.go). Tiers from
# GCE kube-up's configure-kubeapiserver.sh: 1500/500 above 500 nodes, 3000/1000 above 3000 nodes;
# below that the apiserver defaults 400/200 (kubernetes/apiserver pkg/server/config.go).
INFLIGHT_TIERS = ((3000, 3000, 1000), (500, 1500, 500), (0, 400, 200))
# Workers for DELETE-collection calls (namespace deletion at scale); 16 in the 5,000-node job. Default 1.
DELETE_COLLECTION_WORKERS = 16
# "--goaway-chance ... .001 (1/1000) is a recommended starting point" (server_run_options.go help):
# long-lived HTTP/2 clients are occasionally sent to reconnect, so they rebalance across apiservers
# behind the load balancer after one restarts. Meaningless with a single apiserver.
GOAWAY_CHANCE = "0.001"
# Audit log rotation: keep 20 files of 200 MB (4 GB, compressed once rotated), at most 30 days
# (CIS 1.2.17-1.2.19 ask for >= 30 days, >= 10 files, >= 100 MB).
AUDIT_LOG_MAXAGE_DAYS = 30
AUDIT_LOG_MAXBACKUP = 20
AUDIT_LOG_MAXSIZE_MB = 200
# TLS 1.2 suites with forward secrecy and AEAD only (CIS 1.2.29's list); TLS 1.3 suites are fixed by Go.
TLS_CIPHER_SUITES = (
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
)


def inflight_limits(nodes: int) -> tuple[int, int]:
    """``(max-requests-inflight, max-mutating-requests-inflight)`` for a cluster of ``nodes``."""
    for above, reads, writes in INFLIGHT_TIERS:
        if nodes > above:
            return reads, writes
    return INFLIGHT_TIERS[-1][1:]


def _minor(kubernetes_version: str) -> int:
    return int(kubernetes_version.split(".")[1])


def apiserver_flags(
    config: ClusterConfig, addresses: AddressPlan, advertise_address: str, etcd: Mapping[str, str]
) -> dict[str, str | int | bool]:
    """``etcd``: every flag about etcd (servers, the /events override, client TLS, compaction),
    from ``infra.etcd.spec.apiserver_etcd_flags``, which owns how the apiserver talks to etcd."""
    reads, writes = inflight_limits(config.max_nodes_total)
    flags: dict[str, str | int | bool] = {
        "advertise-address": advertise_address,
        # GPU device plugins, the CNI and node agents run privileged DaemonSets.
        "allow-privileged": True,
        "audit-log-compress": True,
        "audit-log-maxage": AUDIT_LOG_MAXAGE_DAYS,
        "audit-log-maxbackup": AUDIT_LOG_MAXBACKUP,
        "audit-log-maxsize": AUDIT_LOG_MAXSIZE_MB,
        "audit-log-path": paths.AUDIT_LOG,
        "audit-policy-file": paths.AUDIT_POLICY,
        # Anonymous requests only for the health paths the load balancer probes (KEP-4633); the
        # file replaces --anonymous-auth, which the apiserver refuses alongside it.
        "authentication-config": paths.AUTHENTICATION_CONFIG,
        "authorization-mode": "Node,RBAC",
        "bind-address": "0.0.0.0",
        "client-ca-file": pki.cert_path(pki.CLUSTER_CA),
        "delete-collection-workers": DELETE_COLLECTION_WORKERS,
        "admission-control-config-file": paths.ADMISSION_CONFIG,
        "enable-admission-plugins": ",".join(admission.PLUGINS),
        # The apiservers run outside the cluster without kube-proxy, so Service IPs mean nothing to
        # them; with this they call aggregated APIs and admission webhooks on their endpoints' pod
        # IPs, which the peered VNets route directly.
        "enable-aggregator-routing": True,
        "enable-bootstrap-token-auth": True,
        "encryption-provider-config": paths.ENCRYPTION_CONFIG,
        # Lease-based `kubernetes` Service endpoints: an apiserver that stops renewing drops out
        # (the default since 1.11; --apiserver-count is deprecated).
        "endpoint-reconciler-type": "lease",
        **etcd,
        # Every kubelet serves a certificate from the cluster CA (serverTLSBootstrap), approved only for its
        # VM's name and addresses in Azure's word (infra/control_plane/csr_approval.py): logs, exec and
        # port-forward verify it.
        "kubelet-certificate-authority": pki.cert_path(pki.CLUSTER_CA),
        "kubelet-client-certificate": pki.cert_path(pki.KUBELET_CLIENT),
        "kubelet-client-key": pki.key_path(pki.KUBELET_CLIENT),
        # Node host names do not resolve across peered VNets (Azure-provided DNS is per VNet).
        "kubelet-preferred-address-types": "InternalIP,Hostname",
        "max-mutating-requests-inflight": writes,
        "max-requests-inflight": reads,
        "profiling": False,
        "proxy-client-cert-file": pki.cert_path(pki.FRONT_PROXY_CLIENT),
        "proxy-client-key-file": pki.key_path(pki.FRONT_PROXY_CLIENT),
        "requestheader-allowed-names": "front-proxy-client",
        "requestheader-client-ca-file": pki.cert_path(pki.FRONT_PROXY_CA),
        "requestheader-extra-headers-prefix": "X-Remote-Extra-",
        "requestheader-group-headers": "X-Remote-Group",
        "requestheader-username-headers": "X-Remote-User",
        "secure-port": ports.APISERVER,
        "service-account-extend-token-expiration": False,
        "service-account-issuer": SERVICE_ACCOUNT_ISSUER,
        "service-account-key-file": pki.SERVICE_ACCOUNT_PUB,
        "service-account-lookup": True,
        "service-account-signing-key-file": pki.SERVICE_ACCOUNT_KEY,
        "service-cluster-ip-range": str(addresses.service_cidr),
        "tls-cert-file": pki.cert_path(pki.APISERVER),
        "tls-cipher-suites": ",".join(TLS_CIPHER_SUITES),
        "tls-min-version": "VersionTLS12",
        "tls-private-key-file": pki.key_path(pki.APISERVER),
    }
    if config.control_plane.apiservers > 1:
        flags["goaway-chance"] = GOAWAY_CHANCE
    if _minor(config.kubernetes_version) == 31:
        # Anonymous-auth conditions are alpha in 1.31 (beta and on by default in 1.32, GA in 1.34).
        flags["feature-gates"] = "AnonymousAuthConfigurableEndpoints=true"
    return flags


def authentication_config(sign_in: PeopleSignInConfig | None = None) -> str:
    """Anonymous requests authenticate only on exact health paths; everything else gets 401. With
    ``peopleSignIn``, people's Entra ID tokens authenticate too (``infra.control_plane.people_sign_in``)."""
    document: dict[str, object] = {
        "apiVersion": "apiserver.config.k8s.io/v1beta1",
        "kind": "AuthenticationConfiguration",
        "anonymous": {"enabled": True, "conditions": [{"path": path} for path in HEALTH_PATHS]},
    }
    if sign_in is not None:
        document["jwt"] = [people_sign_in.jwt_authenticator(sign_in)]
    return yaml_text.dump(document, sort_keys=False)


def encryption_config(secretbox_key_base64: str) -> str:
    """Secrets encrypted at rest with secretbox (XSalsa20-Poly1305); ``identity`` last so data
    written before encryption was on stays readable. Holds the key: build it only inside
    ``Output.apply`` and ship it through Key Vault."""
    document = {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "EncryptionConfiguration",
        "resources": [
            {
                "resources": ["secrets"],
                "providers": [
                    {"secretbox": {"keys": [{"name": "key1", "secret": secretbox_key_base64}]}},
                    {"identity": {}},
                ],
            }
        ],
    }
    return yaml_text.dump(document, sort_keys=False)


def audit_policy() -> str:
    """What the apiserver records. The 2,500-node post found its slow, Event-LISTing per-node agents
    in the audit log, so every read is kept at Metadata (user, user agent, verb, resource, latency);
    the per-node heartbeats that would drown them out at 7,500 nodes are dropped; bodies are never
    logged for secrets or tokens. The first matching rule wins (structure after GCE kube-up's
    create-master-audit-policy)."""
    core_and_events = ["", "events.k8s.io"]
    rules = [
        {"level": "None", "nonResourceURLs": [f"{p}*" for p in HEALTH_PATHS] + ["/version", "/version/"]},
        # Node and leader-election Lease renewals: every kubelet every 10 s, ~750 requests/s at 7,500 nodes.
        {
            "level": "None",
            "verbs": ["get", "update"],
            "userGroups": ["system:nodes"],
            "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}],
        },
        {
            "level": "None",
            "verbs": ["get", "update"],
            "users": [pki.CONTROLLER_MANAGER_USER, pki.SCHEDULER_USER],
            "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}],
        },
        {
            "level": "None",
            "verbs": ["get"],
            "userGroups": ["system:nodes"],
            "resources": [{"group": "", "resources": ["nodes", "nodes/status"]}],
        },
        {
            "level": "None",
            "verbs": ["watch"],
            "users": ["system:kube-proxy"],
            "resources": [
                {"group": "", "resources": ["endpoints", "services"]},
                {"group": "discovery.k8s.io", "resources": ["endpointslices"]},
            ],
        },
        # Event writes are the noisiest traffic there is; Event LISTs fall through and are kept.
        {
            "level": "None",
            "verbs": ["create", "update", "patch"],
            "resources": [{"group": g, "resources": ["events"]} for g in core_and_events],
        },
        {
            "level": "Metadata",
            "resources": [
                {"group": "", "resources": ["secrets", "configmaps", "serviceaccounts/token"]},
                {"group": "authentication.k8s.io", "resources": ["tokenreviews"]},
            ],
        },
        {"level": "Metadata", "verbs": ["get", "list", "watch"]},
        {"level": "Request", "verbs": ["create", "update", "patch", "delete", "deletecollection"]},
        {"level": "Metadata"},
    ]
    document = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"], "rules": rules}
    return yaml_text.dump(document, sort_keys=False)
