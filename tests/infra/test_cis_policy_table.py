"""docs/cis-benchmark.md's CIS tables for sections 3 (control-plane configuration) and 5 (policies), each row's
claims checked against the rendered plan: a prod apiserver's flags and files, and the add-on and cluster
objects both stacks apply.

A row's claims are ``--flag=value`` (the apiserver's command line) or ``check: name``, one of the named
checks below; a claim this test does not know fails, so the table cannot promise what nothing checks.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest

from infra.addons.k8s import POD_SECURITY_ENFORCE_LABEL, pod_templates
from infra.addons.monitoring import NAMESPACE as MONITORING_NAMESPACE
from infra.addons.shared_names import SYSTEM_NAMESPACE
from infra.control_plane import access, admission, cluster_objects, csr_approval, paths, pki
from infra.facts import attestation
from infra.node import cni
from tests.helpers import doc_table_rows, load_yaml, parsed
from tests.infra.addon_fixtures import all_objects, groups_for
from tests.infra.control_plane_files import component_flags, files, machines

DOC = "docs/cis-benchmark.md"
SECTION_3 = [f"3.1.{n}" for n in range(1, 4)] + ["3.2.1", "3.2.2"]
SECTION_5 = (
    [f"5.1.{n}" for n in range(1, 14)]
    + [f"5.2.{n}" for n in range(1, 13)]
    + ["5.3.1", "5.3.2"]
    + ["5.4.1", "5.4.2", "5.5.1"]
    + [f"5.6.{n}" for n in range(1, 5)]
)
ROWS = {
    **doc_table_rows(DOC, "## CIS Kubernetes Benchmark (control-plane configuration)", "3."),
    **doc_table_rows(DOC, "## CIS Kubernetes Benchmark (policies)", "5."),
}
RBAC_KINDS = ("Role", "ClusterRole")


@functools.cache
def objects() -> list[dict]:
    """Everything applied to the cluster by the add-ons (both stacks) and the cluster bootstrap."""
    return [
        *all_objects(groups_for("dev")),
        *all_objects(groups_for("prod")),
        *cluster_objects.cluster_objects(parsed("prod")),
    ]


def _rules() -> list[tuple[str, dict]]:
    return [(o["metadata"]["name"], rule) for o in objects() if o["kind"] in RBAC_KINDS for rule in o["rules"]]


def _grants(verbs: set[str], resources: set[str], groups: set[str] | None = None) -> list[str]:
    """Roles with a rule granting any of ``verbs`` on any of ``resources`` (wildcards match everything)."""
    found = []
    for name, rule in _rules():
        if "resources" not in rule:
            continue
        if groups is not None and not ({"*", *groups} & set(rule.get("apiGroups", []))):
            continue
        if ({"*", *verbs} & set(rule["verbs"])) and ({"*", *resources} & set(rule["resources"])):
            found.append(name)
    return found


def _flags() -> dict[str, str]:
    return component_flags(machines("prod")[0], paths.APISERVER_UNIT)


def _admission() -> dict:
    document = load_yaml(files(machines("prod")[0])[paths.ADMISSION_CONFIG])
    return {plugin["name"]: plugin["configuration"] for plugin in document["plugins"]}


# ----------------------------------------------------------------------------- the named checks


def no_user_certificate_is_issued() -> None:
    """Every certificate the program issues is a component's; system:masters is minted on demand, for hours
    (infra/control_plane/access.py), never issued into state."""
    certificates = pki.certificates()
    assert [c for c in certificates if c.organization == pki.SUPERUSER_GROUP] == []
    assert access.MAX_HOURS <= 8 and access.DEPLOY_HOURS <= access.MAX_HOURS
    others = {c.common_name for c in certificates}
    assert others == {
        pki.KUBELET_CLIENT_USER,
        "front-proxy-client",
        pki.CONTROLLER_MANAGER_USER,
        pki.SCHEDULER_USER,
        pki.CSR_APPROVER_USER,
        pki.TOKEN_MINTER_USER,
    }, others
    authentication = load_yaml(files(machines("prod")[0])[paths.AUTHENTICATION_CONFIG])
    assert "jwt" not in authentication  # no identity provider: researchers' access is an operator's to grant


def no_add_on_may_create_tokens() -> None:
    assert not _grants({"create"}, {"serviceaccounts/token", "serviceaccounts"}, {""})


def bootstrap_tokens_only_join_nodes() -> None:
    bindings = [o for o in objects() if o["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    bootstrap = {
        o["roleRef"]["name"]
        for o in bindings
        if any(s["name"].startswith("system:bootstrappers") for s in o["subjects"])
    }
    # CSR creation only: no nodeclient, so the controller-manager approves nothing a token sends.
    assert bootstrap == {"system:node-bootstrapper"}, bootstrap
    assert not [
        o["metadata"]["name"] for o in bindings if any(s["name"] == "system:bootstrappers" for s in o["subjects"])
    ], "only our narrower group"
    # Besides the controller-manager (built in: a node's renewal of its own client certificate), only the node
    # certificates' approver approves, for its two signers alone.
    approver = [cluster_objects.CSR_APPROVER_ROLE]
    assert _grants({"approve"}, {"signers"}, {"certificates.k8s.io"}) == approver
    assert _grants({"update", "patch"}, {"certificatesigningrequests/approval"}, {"certificates.k8s.io"}) == approver
    (signers,) = [rule for name, rule in _rules() if name in approver and "signers" in rule["resources"]]
    assert signers["resourceNames"] == [csr_approval.KUBELET_SERVING_SIGNER, attestation.KUBELET_CLIENT_SIGNER]
    # Every token expires: the only identity granted Secret creation in kube-system besides the built-in ones is the
    # token minter's, and its policy admits only tokens that expire within a day.
    assert _grants({"create"}, {"secrets"}, {""}) == [cluster_objects.MINTER_ROLE]
    (policy,) = [
        o
        for o in objects()
        if o["metadata"]["name"] == admission.TOKEN_MINTER_POLICY and "validations" in o.get("spec", {})
    ]
    assert any("'expiration' in object.data" in v["expression"] for v in policy["spec"]["validations"])


def _audit_level(policy: dict, *, verb: str, group: str, resource: str, user: str = "alice") -> str:
    """The level of the first rule that matches a request (audit.k8s.io/v1 Policy semantics)."""
    for rule in policy["rules"]:
        if "nonResourceURLs" in rule or user not in rule.get("users", [user]):
            continue
        if "system:authenticated" not in rule.get("userGroups", ["system:authenticated"]):  # alice's only group
            continue
        if "verbs" in rule and verb not in rule["verbs"]:
            continue
        if "resources" in rule and not any(
            r.get("group", "") == group and resource in r.get("resources", [resource]) for r in rule["resources"]
        ):
            continue
        return rule["level"]
    return "None"


def audit_policy_covers_secrets_writes_and_exec() -> None:
    policy = load_yaml(files(machines("prod")[0])[paths.AUDIT_POLICY])
    for resource in ("secrets", "configmaps"):
        for verb in ("get", "create", "update"):
            assert _audit_level(policy, verb=verb, group="", resource=resource) == "Metadata", (verb, resource)
    assert _audit_level(policy, verb="create", group="authentication.k8s.io", resource="tokenreviews") == "Metadata"
    for group, resource in (("", "pods"), ("apps", "deployments")):
        for verb in ("create", "update", "patch", "delete"):
            assert _audit_level(policy, verb=verb, group=group, resource=resource) in ("Request", "RequestResponse")
    for group, resource in (("", "pods/exec"), ("", "pods/portforward"), ("", "pods/proxy"), ("", "services/proxy")):
        for verb in ("create", "get"):
            assert _audit_level(policy, verb=verb, group=group, resource=resource) != "None", resource


def nothing_binds_cluster_admin() -> None:
    assert not [
        o["metadata"]["name"]
        for o in objects()
        if o["kind"] in ("ClusterRoleBinding", "RoleBinding") and o["roleRef"]["name"] == "cluster-admin"
    ]


def no_add_on_role_reads_secrets() -> None:
    assert not _grants({"get", "list", "watch"}, {"secrets"}, {""})


def no_wildcard_in_add_on_roles() -> None:
    wild = [
        name
        for name, rule in _rules()
        if "*" in {*rule.get("verbs", []), *rule.get("resources", []), *rule.get("apiGroups", [])}
    ]
    assert not wild, wild


def no_add_on_role_creates_pods() -> None:
    assert not _grants({"create"}, {"pods"}, {""})


def every_add_on_pod_has_its_own_service_account() -> None:
    for workload, pod in pod_templates(objects()):
        assert pod.get("serviceAccountName", "default") != "default", workload["metadata"]["name"]


def tokens_mounted_only_where_the_api_is_used() -> None:
    accounts = {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects() if o["kind"] == "ServiceAccount"
    }
    bound = {
        (s.get("namespace"), s["name"])
        for o in objects()
        if o["kind"] in ("ClusterRoleBinding", "RoleBinding")
        for s in o["subjects"]
        if s["kind"] == "ServiceAccount"
    }
    for workload, pod in pod_templates(objects()):
        key = (workload["metadata"]["namespace"], pod["serviceAccountName"])
        automount = pod.get("automountServiceAccountToken", accounts[key].get("automountServiceAccountToken", True))
        mounts_by_hand = any("projected" in v for v in pod.get("volumes", []))
        if automount or mounts_by_hand:
            assert key in bound, f"{workload['metadata']['name']} mounts a token its account has no use for"


def no_add_on_role_binds_escalates_or_impersonates() -> None:
    assert not _grants(
        {"bind", "escalate", "impersonate"}, {"clusterroles", "roles", "users", "groups", "serviceaccounts"}
    )


def no_add_on_role_creates_persistentvolumes() -> None:
    assert not _grants({"create"}, {"persistentvolumes"}, {""})


def no_add_on_role_uses_nodes_proxy() -> None:
    assert not _grants({"get", "create", "*"}, {"nodes/proxy"}, {""})


def no_add_on_role_writes_webhook_configurations() -> None:
    assert not _grants(
        {"create", "update", "patch", "delete"},
        {"validatingwebhookconfigurations", "mutatingwebhookconfigurations"},
        {"admissionregistration.k8s.io"},
    )


def baseline_enforced_everywhere_but_kube_system() -> None:
    assert "PodSecurity" not in _flags().get("disable-admission-plugins", "")
    pod_security = _admission()["PodSecurity"]
    assert pod_security["defaults"]["enforce"] == "baseline"
    assert pod_security["exemptions"] == {"usernames": [], "runtimeClasses": [], "namespaces": [SYSTEM_NAMESPACE]}
    assert _flags()["admission-control-config-file"] == paths.ADMISSION_CONFIG


def restricted_audited_warned_and_enforced_for_add_ons() -> None:
    defaults = _admission()["PodSecurity"]["defaults"]
    assert defaults["audit"] == defaults["warn"] == "restricted"
    levels = {
        o["metadata"]["name"]: o["metadata"]["labels"][POD_SECURITY_ENFORCE_LABEL]
        for o in objects()
        if o["kind"] == "Namespace"
    }
    # The one exception: Prometheus's TSDB on the node's local NVMe is a hostPath volume
    # (tests/infra/test_addons_pod_security.py: nothing else there goes beyond baseline).
    assert levels.pop(MONITORING_NAMESPACE) == "privileged"
    assert levels and set(levels.values()) == {"restricted"}, levels


def no_network_policy_engine() -> None:
    plugins = [p["type"] for p in cni.conflist(None)["plugins"]]
    assert plugins == ["azure-vnet", "portmap"], plugins  # no policy plugin: NetworkPolicy would not be enforced
    assert not [o for o in objects() if o["kind"] == "NetworkPolicy"]


def no_add_on_reads_a_secret_from_the_environment() -> None:
    for workload, pod in pod_templates(objects()):
        for container in pod["containers"] + pod.get("initContainers", []):
            assert not [e for e in container.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})]
            assert not [e for e in container.get("envFrom", []) if "secretRef" in e], workload["metadata"]["name"]


def no_image_policy_webhook() -> None:
    assert "ImagePolicyWebhook" not in _flags()["enable-admission-plugins"].split(",")
    assert _flags()["enable-admission-plugins"] == ",".join(admission.PLUGINS)


def no_add_on_workload_in_default() -> None:
    assert not [w["metadata"]["name"] for w, _ in pod_templates(objects()) if w["metadata"]["namespace"] == "default"]
    assert {o["kind"] for o in objects() if o.get("metadata", {}).get("namespace") == "default"} <= {
        "Role",
        "RoleBinding",
    }


def restricted_add_on_pods_use_runtime_default() -> None:
    restricted = {
        o["metadata"]["name"]
        for o in objects()
        if o["kind"] == "Namespace" and o["metadata"]["labels"][POD_SECURITY_ENFORCE_LABEL] == "restricted"
    }
    checked = 0
    for workload, pod in pod_templates(objects()):
        if workload["metadata"]["namespace"] in restricted:
            checked += 1
            assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, workload["metadata"]["name"]
    assert checked


def every_add_on_container_has_a_security_context() -> None:
    for workload, pod in pod_templates(objects()):
        for container in pod["containers"] + pod.get("initContainers", []):
            assert container.get("securityContext"), (workload["metadata"]["name"], container["name"])


CHECKS: dict[str, Callable[[], None]] = {
    name.replace("_", "-"): check
    for name, check in list(globals().items())
    if callable(check)
    and not name.startswith("_")
    and name[0].islower()
    and check.__module__ == __name__
    and not name.startswith("test")
    and name not in ("objects",)
}


def test_the_tables_cover_every_check_of_sections_3_and_5():
    assert list(ROWS) == SECTION_3 + SECTION_5


@pytest.mark.parametrize("check", SECTION_3 + SECTION_5)
def test_row_matches_the_rendered_plan(check):
    claims = ROWS[check]
    assert claims, f"{check}: no rendered setting in the table"
    for claim in claims:
        if claim.startswith("check: "):
            name = claim.removeprefix("check: ")
            assert name in CHECKS, f"{check}: no check named {name}"
            CHECKS[name]()
        elif claim.startswith("--"):
            key, _, value = claim[2:].partition("=")
            assert _flags().get(key) == value, f"{check}: --{key}={_flags().get(key)}"
        else:
            raise AssertionError(f"{check}: a claim this test cannot check: {claim}")


def test_every_named_check_is_used_by_a_row():
    used = {
        claim.removeprefix("check: ") for claims in ROWS.values() for claim in claims if claim.startswith("check: ")
    }
    assert used == set(CHECKS), set(CHECKS) ^ used
