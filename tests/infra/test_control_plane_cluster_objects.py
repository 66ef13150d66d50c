"""The in-cluster objects: valid against the Kubernetes OpenAPI schemas, and doing what they claim."""

from __future__ import annotations

import pytest

from infra.control_plane import cluster_objects, flowcontrol, pki, scheduler, token_minting
from infra.control_plane.apiserver import inflight_limits
from tests import k8s_schema
from tests.helpers import parsed

VERSIONS = ("1.31", "1.34")


def _documents() -> list[dict]:
    token = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": token_minting.bootstrap_token_name("abc123"),
            "namespace": token_minting.BOOTSTRAP_TOKEN_NAMESPACE,
        },
        "type": token_minting.BOOTSTRAP_TOKEN_TYPE,
        "stringData": token_minting.bootstrap_token_data("abc123", "0123456789abcdef", "2026-11-28T09:00:00Z"),
    }
    return [*cluster_objects.cluster_objects(parsed("prod")), token]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("document", _documents(), ids=lambda d: f"{d['kind']}-{d['metadata']['name']}")
def test_object_is_valid(document, version):
    k8s_schema.validate(document, version, strict=True)


def test_apf_objects_are_validated_not_skipped():
    broken = flowcontrol.objects()[0]
    broken = {**broken, "spec": {**broken["spec"], "limited": {**broken["spec"]["limited"], "shares": 3}}}
    with pytest.raises(k8s_schema.ValidationError):
        k8s_schema.validate(broken, "1.34", strict=True)


def test_service_account_lists_are_fenced_off():
    level, schema = flowcontrol.service_account_lists()
    limited = level["spec"]["limited"]
    assert limited["lendablePercent"] == 0 and limited["borrowingLimitPercent"] == 0
    spec = schema["spec"]
    # After kube-system-service-accounts (900), before the built-in service-accounts schema (9000).
    assert 900 < spec["matchingPrecedence"] < 9000
    assert spec["distinguisherMethod"] == {"type": "ByUser"}  # one DaemonSet = one flow
    (rule,) = spec["rules"]
    assert rule["subjects"] == [{"kind": "Group", "group": {"name": "system:serviceaccounts"}}]
    assert rule["resourceRules"][0]["verbs"] == ["list"]


def test_level_seats_at_7500_nodes():
    total = sum(inflight_limits(7500))
    assert total == 4000
    assert 250 <= flowcontrol.seats(total) <= 350
    assert 100 <= flowcontrol.seats(total, flowcontrol.JOIN_SHARES) <= 200


def test_node_joins_have_their_own_lane_before_the_heartbeats():
    """A join burst's CSRs and Node creates queue in their own level, never in node-high."""
    level, schema = flowcontrol.node_joins()
    rendered = {(d["kind"], d["metadata"]["name"]) for d in cluster_objects.cluster_objects(parsed("prod"))}
    assert {("PriorityLevelConfiguration", flowcontrol.JOIN_LEVEL), ("FlowSchema", flowcontrol.JOIN_LEVEL)} <= rendered
    limited = level["spec"]["limited"]
    assert limited["borrowingLimitPercent"] == 0  # never takes the heartbeats' seats
    assert limited["limitResponse"]["type"] == "Queue"  # a burst waits; it is not refused at once
    spec = schema["spec"]
    assert spec["priorityLevelConfiguration"] == {"name": flowcontrol.JOIN_LEVEL}
    # Matched before the built-in system-node-high (400), which would send Node creates to node-high.
    assert spec["matchingPrecedence"] < 400
    requests = {
        (rule["subjects"][0]["group"]["name"], verb, resource)
        for rule in spec["rules"]
        for r in rule["resourceRules"]
        for verb in r["verbs"]
        for resource in r["resources"]
    }
    assert ("system:bootstrappers", "create", "certificatesigningrequests") in requests
    assert ("system:nodes", "create", "nodes") in requests
    # Only registration: a running node's updates, patches and Lease renewals stay in node-high.
    assert {verb for group, verb, _ in requests if group == "system:nodes"} == {"create"}


def test_node_join_rbac_lets_only_our_token_group_bootstrap():
    bindings = {b["roleRef"]["name"]: b["subjects"] for b in cluster_objects.node_join_rbac()}
    group = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": cluster_objects.BOOTSTRAP_GROUP}]
    assert bindings["system:node-bootstrapper"] == group
    # Not nodeclient: the controller-manager approves nothing the token sends (the attested join approves).
    assert "system:certificates.k8s.io:certificatesigningrequests:nodeclient" not in bindings
    # Not selfnodeclient either: a node's renewal is the approver's, which asks Azure whether its VM still exists.
    assert "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient" not in bindings
    assert bindings["system:kubelet-api-admin"][0]["name"] == pki.KUBELET_CLIENT_USER
    assert bindings["system:node-proxier"][0]["name"] == "system:nodes"  # kube-proxy uses the node's cert
    assert cluster_objects.BOOTSTRAP_GROUP.startswith("system:bootstrappers:")
    data = token_minting.bootstrap_token_data("abc123", "s", "2026-11-28T09:00:00Z")
    assert data["auth-extra-groups"] == cluster_objects.BOOTSTRAP_GROUP
    assert data["expiration"] == "2026-11-28T09:00:00Z"  # every token expires
    assert "usage-bootstrap-signing" not in data


def test_scheduler_may_read_pod_groups():
    role, binding = cluster_objects.gang_scheduling_rbac()
    assert role["rules"][0]["apiGroups"] == [cluster_objects.POD_GROUP_API_GROUP]
    assert binding["subjects"][0]["name"] == pki.SCHEDULER_USER
    crd = cluster_objects.pod_group_crd()
    assert crd["metadata"]["name"] == "podgroups.scheduling.x-k8s.io"
    assert scheduler.POD_GROUP_LABEL.startswith(crd["spec"]["group"] + "/")
