"""No per-node agent may LIST or WATCH the apiserver (the 2,500-node post's Fluentd/Datadog lesson).

Asserted over the RBAC objects the add-ons render: for every DaemonSet, the service account
its pods run as is bound only to rules a single node needs (GET/PATCH of nodes at most), and
agents that need nothing get no token at all.
"""

from __future__ import annotations

import pytest

from infra.addons.k8s import Obj
from tests.infra.addon_fixtures import all_objects, groups_for

CLUSTER_STATE_VERBS = {"list", "watch", "*"}


def _rules_for(objects: list[Obj], namespace: str, account: str) -> list[Obj]:
    roles = {
        (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
        for o in objects
        if o["kind"] in ("Role", "ClusterRole")
    }
    rules = []
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        subjects = binding["subjects"]
        if not any(
            s["kind"] == "ServiceAccount" and s["name"] == account and s["namespace"] == namespace for s in subjects
        ):
            continue
        ref = binding["roleRef"]
        role_ns = binding["metadata"].get("namespace", "") if ref["kind"] == "Role" else ""
        role = roles.get((ref["kind"], role_ns, ref["name"]))
        assert role is not None, f"{binding['metadata']['name']} binds a role the add-ons do not render"
        rules += role["rules"]
    return rules


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_daemon_sets_never_list_or_watch(stack):
    objects = all_objects(groups_for(stack))
    daemon_sets = [o for o in objects if o["kind"] == "DaemonSet"]
    assert len(daemon_sets) >= 4
    for daemon in daemon_sets:
        pod = daemon["spec"]["template"]["spec"]
        namespace = daemon["metadata"]["namespace"]
        account = pod.get("serviceAccountName", "default")
        for rule in _rules_for(objects, namespace, account):
            assert not CLUSTER_STATE_VERBS & set(rule["verbs"]), (daemon["metadata"]["name"], rule)
            assert set(rule.get("resources", [])) <= {"nodes"}, (daemon["metadata"]["name"], rule)
            assert "nonResourceURLs" not in rule


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_agents_that_never_call_the_apiserver_get_no_token(stack):
    objects = all_objects(groups_for(stack))
    for daemon in (o for o in objects if o["kind"] == "DaemonSet"):
        pod = daemon["spec"]["template"]["spec"]
        assert pod.get("automountServiceAccountToken") is False, daemon["metadata"]["name"]
        account = pod["serviceAccountName"]
        needs_api = bool(_rules_for(objects, daemon["metadata"]["namespace"], account))
        projects_token = any(
            "projected" in v and any("serviceAccountToken" in s for s in v["projected"]["sources"])
            for v in pod.get("volumes", [])
        )
        assert needs_api == projects_token, daemon["metadata"]["name"]


def test_the_only_node_agent_with_api_access_cannot_read_cluster_state():
    objects = all_objects(groups_for("prod"))
    rules = _rules_for(objects, "kube-system", "gpu-health-check")
    assert rules == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]


def test_cluster_level_readers_are_single_deployments():
    """Whatever lists or watches the cluster is a Deployment (a bounded number of readers, CoreDNS's
    capped by its proportional autoscaler), never a DaemonSet."""
    objects = all_objects(groups_for("prod"))
    for workload in (o for o in objects if o["kind"] in ("Deployment", "DaemonSet")):
        pod = workload["spec"]["template"]["spec"]
        rules = _rules_for(objects, workload["metadata"]["namespace"], pod.get("serviceAccountName", "default"))
        if any(CLUSTER_STATE_VERBS & set(rule["verbs"]) for rule in rules):
            assert workload["kind"] == "Deployment", workload["metadata"]
