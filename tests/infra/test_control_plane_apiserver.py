"""kube-apiserver as rendered into an apiserver VM's cloud-init: every flag, and the files they name."""

from __future__ import annotations

import base64
import json

import pytest

from infra.control_plane import apiserver, machine_identity, paths, pki
from infra.control_plane.apiserver_machine import apiserver_machines
from tests.helpers import load_yaml
from tests.infra.control_plane_files import component_flags, etcd_flags, files, machines, spec


@pytest.fixture(scope="module")
def prod_flags() -> dict[str, str]:
    return component_flags(machines("prod")[1], paths.APISERVER_UNIT)


PROD_FLAGS = {
    "advertise-address": "${MACHINE_ADDRESS}",  # the machine's own address, read from IMDS at boot
    "allow-privileged": "true",
    "anonymous-auth": None,  # replaced by --authentication-config (the two are mutually exclusive)
    "audit-log-compress": "true",
    "audit-log-maxage": "30",
    "audit-log-maxbackup": "20",
    "audit-log-maxsize": "200",
    "audit-log-path": "/var/log/kubernetes/audit/audit.log",
    "audit-policy-file": "/etc/kubernetes/audit-policy.yaml",
    "authentication-config": "/etc/kubernetes/authentication-config.yaml",
    "authorization-mode": "Node,RBAC",
    "client-ca-file": "/etc/kubernetes/pki/ca.crt",
    "delete-collection-workers": "16",
    "enable-admission-plugins": "DenyServiceExternalIPs,NodeRestriction,PodNodeSelector,PodTolerationRestriction",
    "admission-control-config-file": "/etc/kubernetes/admission-config.yaml",
    "enable-aggregator-routing": "true",
    "enable-bootstrap-token-auth": "true",
    "encryption-provider-config": "/etc/kubernetes/encryption-config.yaml",
    "endpoint-reconciler-type": "lease",
    "apiserver-count": None,  # deprecated; the lease reconciler needs no count
    "etcd-cafile": "/etc/kubernetes/pki/etcd/ca.crt",
    "etcd-certfile": "/etc/kubernetes/pki/apiserver-etcd-client.crt",
    "etcd-keyfile": "/etc/kubernetes/pki/apiserver-etcd-client.key",
    "etcd-compaction-interval": "0",  # etcd compacts itself (infra/etcd): one owner
    "etcd-servers": ",".join(f"https://10.0.0.{4 + i}:2379" for i in range(5)),
    "etcd-servers-overrides": "/events#" + ";".join(f"https://10.0.0.{36 + i}:2379" for i in range(3)),
    "goaway-chance": "0.001",
    "kubelet-client-certificate": "/etc/kubernetes/pki/apiserver-kubelet-client.crt",
    "kubelet-client-key": "/etc/kubernetes/pki/apiserver-kubelet-client.key",
    "kubelet-preferred-address-types": "InternalIP,Hostname",
    "max-mutating-requests-inflight": "1000",
    "max-requests-inflight": "3000",
    "profiling": "false",
    "proxy-client-cert-file": "/etc/kubernetes/pki/front-proxy-client.crt",
    "proxy-client-key-file": "/etc/kubernetes/pki/front-proxy-client.key",
    "requestheader-allowed-names": "front-proxy-client",
    "requestheader-client-ca-file": "/etc/kubernetes/pki/front-proxy-ca.crt",
    "secure-port": "6443",
    "service-account-extend-token-expiration": "false",
    "service-account-issuer": "https://kubernetes.default.svc.cluster.local",
    "service-account-key-file": "/etc/kubernetes/pki/sa.pub",
    "service-account-lookup": "true",
    "service-account-signing-key-file": "/etc/kubernetes/pki/sa.key",
    "service-cluster-ip-range": "172.20.0.0/16",
    "tls-cert-file": "/etc/kubernetes/pki/apiserver.crt",
    "tls-private-key-file": "/etc/kubernetes/pki/apiserver.key",
    "tls-min-version": "VersionTLS12",
    "token-auth-file": None,
    "feature-gates": None,  # only 1.31 needs one
}


@pytest.mark.parametrize("flag,expected", PROD_FLAGS.items(), ids=PROD_FLAGS.keys())
def test_prod_apiserver_flag(prod_flags, flag, expected):
    assert prod_flags.get(flag) == expected


def test_cipher_suites_are_forward_secret_aead_only(prod_flags):
    suites = prod_flags["tls-cipher-suites"].split(",")
    assert suites and all(s.startswith("TLS_ECDHE_") and ("GCM" in s or "CHACHA20" in s) for s in suites)


def test_events_override_lists_exactly_the_events_members():
    cluster = spec("prod")
    flags = component_flags(machines("prod")[0], paths.APISERVER_UNIT)
    main = flags["etcd-servers"].split(",")
    resource, servers = flags["etcd-servers-overrides"].split("#")
    events = servers.split(";")
    assert len(main) == cluster.config.etcd.members == 5
    assert len(events) == cluster.config.events_etcd.members == 3
    assert set(main).isdisjoint(events)
    assert resource == "/events"
    assert events == [f"https://{ip}:2379" for ip in cluster.addresses.etcd_ips("events-etcd", 3)]


def test_apiserver_talks_to_etcd_with_its_client_certificate_and_leaves_compaction_to_etcd():
    flags = component_flags(machines("prod")[0], paths.APISERVER_UNIT)
    assert flags["etcd-certfile"].endswith("apiserver-etcd-client.crt")
    assert flags["etcd-keyfile"].endswith("apiserver-etcd-client.key")
    assert flags["etcd-cafile"].endswith("etcd/ca.crt")
    assert flags["etcd-compaction-interval"] == "0"


@pytest.mark.parametrize(
    "nodes,limits",
    [
        (7500, (3000, 1000)),
        (3001, (3000, 1000)),
        (3000, (1500, 500)),
        (501, (1500, 500)),
        (500, (400, 200)),
        (5, (400, 200)),
    ],
)
def test_inflight_limits_scale_with_the_cluster(nodes, limits):
    assert apiserver.inflight_limits(nodes) == limits


def test_single_apiserver_gets_no_goaway_and_default_limits():
    flags = component_flags(machines("dev")[0], paths.APISERVER_UNIT)
    assert "goaway-chance" not in flags
    assert (flags["max-requests-inflight"], flags["max-mutating-requests-inflight"]) == ("400", "200")


def test_kubernetes_131_enables_anonymous_auth_conditions():
    cluster = spec("dev", kubernetesVersion="1.31.5")
    flags = component_flags(apiserver_machines(cluster, etcd_flags(cluster))[0], paths.APISERVER_UNIT)
    assert flags["feature-gates"] == "AnonymousAuthConfigurableEndpoints=true"


def test_every_file_a_flag_names_is_delivered(prod_flags):
    """Each path under /etc/kubernetes is written by cloud-init, fetched from Key Vault at boot, or issued on
    the machine at boot (its serving certificate and key, by the identity unit)."""
    machine = machines("prod")[0]
    identity = json.loads(files(machine)[machine_identity.CONFIG])
    written = set(files(machine)) | {identity["cert"], identity["key"]}
    fetched = {f.path for f in pki.apiserver_secret_files(pki.certificates())}
    named = {value for value in prod_flags.values() if value.startswith("/etc/kubernetes/")}
    assert named - written - fetched == set()
    assert named & written and named & fetched


def test_audit_policy_is_written_and_referenced(prod_flags):
    policy_path = prod_flags["audit-policy-file"]
    policy = load_yaml(files(machines("prod")[0])[policy_path])
    assert policy["apiVersion"] == "audit.k8s.io/v1" and policy["kind"] == "Policy"
    assert policy["omitStages"] == ["RequestReceived"]
    assert prod_flags["audit-log-path"].startswith(paths.AUDIT_LOG_DIR + "/")


def _level(
    policy: dict,
    *,
    user: str,
    groups: tuple[str, ...] = (),
    verb: str = "",
    group: str = "",
    resource: str = "",
    path: str = "",
) -> str:
    """The level of the first rule matching a request (audit.k8s.io/v1 matching semantics)."""
    for rule in policy["rules"]:
        if "users" in rule and user not in rule["users"]:
            continue
        if "userGroups" in rule and not set(groups) & set(rule["userGroups"]):
            continue
        if "verbs" in rule and verb not in rule["verbs"]:
            continue
        if "nonResourceURLs" in rule:
            if not path or not any(
                path == p or (p.endswith("*") and path.startswith(p[:-1])) for p in rule["nonResourceURLs"]
            ):
                continue
        elif path and "resources" in rule:
            continue
        if "resources" in rule and not any(
            r["group"] == group and resource in r.get("resources", [resource]) for r in rule["resources"]
        ):
            continue
        return rule["level"]
    return "None"


@pytest.fixture(scope="module")
def policy() -> dict:
    return load_yaml(apiserver.audit_policy())


AUDIT_CASES = {
    "slow LIST of Events by a node agent is kept": (
        dict(user="system:serviceaccount:monitoring:agent", verb="list", resource="events"),
        "Metadata",
    ),
    "LIST of pods is kept": (dict(user="alice", verb="list", resource="pods"), "Metadata"),
    "secrets never log bodies": (dict(user="alice", verb="create", resource="secrets"), "Metadata"),
    "token reviews never log bodies": (
        dict(user="x", verb="create", group="authentication.k8s.io", resource="tokenreviews"),
        "Metadata",
    ),
    "writes keep the request": (dict(user="alice", verb="patch", group="apps", resource="deployments"), "Request"),
    "kubelet lease renewals are dropped": (
        dict(
            user="system:node:n1",
            groups=("system:nodes",),
            verb="update",
            group="coordination.k8s.io",
            resource="leases",
        ),
        "None",
    ),
    "event writes are dropped": (dict(user="system:node:n1", verb="create", resource="events"), "None"),
    "health probes are dropped": (dict(user="system:anonymous", verb="get", path="/readyz"), "None"),
}


@pytest.mark.parametrize("request_,level", AUDIT_CASES.values(), ids=AUDIT_CASES.keys())
def test_audit_policy_levels(policy, request_, level):
    assert _level(policy, **request_) == level


def test_anonymous_requests_only_reach_health_endpoints():
    machine_files = files(machines("prod")[0])
    config = load_yaml(machine_files[paths.AUTHENTICATION_CONFIG])
    assert config["kind"] == "AuthenticationConfiguration"
    assert config["anonymous"]["enabled"] is True
    assert [c["path"] for c in config["anonymous"]["conditions"]] == ["/healthz", "/livez", "/readyz"]


def test_encryption_config_encrypts_secrets_with_secretbox_first():
    key = base64.b64encode(bytes(range(32))).decode()
    config = load_yaml(apiserver.encryption_config(key))
    (resources,) = config["resources"]
    assert resources["resources"] == ["secrets"]
    first, last = resources["providers"]
    assert base64.b64decode(first["secretbox"]["keys"][0]["secret"]) == bytes(range(32))
    assert last == {"identity": {}}
    assert paths.ENCRYPTION_CONFIG not in files(machines("prod")[0]), "holds the key: Key Vault only"
