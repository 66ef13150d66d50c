"""API Priority and Fairness: a fenced-off lane for LISTs made by service accounts, and one for node joins.

Both outages the OpenAI posts trace to the API were per-node agents: Fluentd and Datadog LISTing
Events from every node (2,500-node post), and a telemetry DaemonSet whose calls scaled with the
cluster (OpenAI's December 2024 incident). Every pod of a DaemonSet runs as the same service
account, so with ``ByUser`` flows one DaemonSet is one flow, however many nodes it runs on; fair
queuing then bounds it to its share of this level, and the level can neither lend nor borrow
seats, so kubelets, controllers and people keep theirs.

Matched after the built-in ``kube-system-service-accounts`` schema (precedence 900), so the
controllers and the autoscaler in kube-system keep ``workload-high``; before the built-in
``service-accounts`` schema (9000). The built-in levels have 245 nominal shares in total; with
these 20 and the join level's 10, the level gets 20/275 of each apiserver's seats (``--max-requests-inflight`` plus
``--max-mutating-requests-inflight``): about 290 of 4,000 at 7,500 nodes, where a LIST costs 1-10.

Node joins: "adding hundreds of nodes at once can overload API server capacity. Smoothing this
out, even just by a few seconds, has helped avoid outages" (7,500-node post). A joining node makes
two requests no running node makes: its bootstrap-token identity creates (and watches) its
client-certificate CSR, and its new ``system:node:<name>`` identity creates its Node. Without this
lane the CSRs fall to ``global-default`` and the Node creates to the built-in ``system-node-high``
schema (precedence 400), i.e. into ``node-high``, where every running node's Lease renewals and
status updates are: a burst of registrations queues ahead of the heartbeats that keep nodes Ready.
Here they have their own small level, matched before ``system-node-high`` (350 < 400), that may
lend idle seats but never borrow: a join burst waits in its own queues, a few seconds if need be,
while heartbeats keep ``node-high``. The autoscaler's half of the lesson (a bounded scale-up per
loop) is ``infra.addons.cluster_autoscaler``.
"""

from __future__ import annotations

from typing import Any

API_VERSION = "flowcontrol.apiserver.k8s.io/v1"
LEVEL = "supercluster-service-account-lists"
NOMINAL_CONCURRENCY_SHARES = 20
MATCHING_PRECEDENCE = 950
# Shuffle sharding: many queues and a small hand keep one heavy flow from colliding with most
# others (the built-in workload-low level uses 128 / 6 / 50).
QUEUES, HAND_SIZE, QUEUE_LENGTH_LIMIT = 128, 6, 50
# Nominal shares of the built-in priority levels the apiserver maintains (exempt has none):
# node-high 40, system 30, leader-election 10, workload-high 40, workload-low 100,
# global-default 20, catch-all 5 (kubernetes/apiserver pkg/apis/flowcontrol/bootstrap/default.go).
BUILTIN_SHARES = 245

JOIN_LEVEL = "supercluster-node-joins"
JOIN_SHARES = 10  # about 145 of 4,000 seats at 7,500 nodes; a CSR or Node create costs one seat
# Before the built-in system-node-high schema (400, pkg/apis/flowcontrol/bootstrap/default.go), which
# would put Node creates into node-high with the heartbeats.
JOIN_MATCHING_PRECEDENCE = 350
# Every bootstrap-token user is in this group (kubernetes.io/docs/reference/access-authn-authz/bootstrap-tokens).
BOOTSTRAPPERS_GROUP = "system:bootstrappers"
NODES_GROUP = "system:nodes"
# Joins are rare: idle, the level lends half its seats; it never borrows anyone else's.
JOIN_LENDABLE_PERCENT = 50


TOTAL_SHARES = BUILTIN_SHARES + NOMINAL_CONCURRENCY_SHARES + JOIN_SHARES


def seats(total_seats: int, shares: int = NOMINAL_CONCURRENCY_SHARES) -> int:
    """A level's nominal seats on an apiserver with ``total_seats`` (default: the service-account lists')."""
    return -(-total_seats * shares // TOTAL_SHARES)


def _level(name: str, shares: int, lendable_percent: int) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "PriorityLevelConfiguration",
        "metadata": {"name": name},
        "spec": {
            "type": "Limited",
            "limited": {
                "nominalConcurrencyShares": shares,
                "lendablePercent": lendable_percent,
                "borrowingLimitPercent": 0,
                "limitResponse": {
                    "type": "Queue",
                    "queuing": {"queues": QUEUES, "handSize": HAND_SIZE, "queueLengthLimit": QUEUE_LENGTH_LIMIT},
                },
            },
        },
    }


def _schema(name: str, precedence: int, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "FlowSchema",
        "metadata": {"name": name},
        "spec": {
            "priorityLevelConfiguration": {"name": name},
            "matchingPrecedence": precedence,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": rules,
        },
    }


def _rule(group: str, verbs: list[str], api_group: str, resource: str, namespaced: bool = False) -> dict[str, Any]:
    rule: dict[str, Any] = {"verbs": verbs, "apiGroups": [api_group], "resources": [resource], "clusterScope": True}
    if namespaced:
        rule["namespaces"] = ["*"]
    return {"subjects": [{"kind": "Group", "group": {"name": group}}], "resourceRules": [rule]}


def service_account_lists() -> list[dict[str, Any]]:
    return [
        _level(LEVEL, NOMINAL_CONCURRENCY_SHARES, 0),
        _schema(LEVEL, MATCHING_PRECEDENCE, [_rule("system:serviceaccounts", ["list"], "*", "*", namespaced=True)]),
    ]


def node_joins() -> list[dict[str, Any]]:
    """The joining node's CSR (as its bootstrap token) and its Node registration (as the node)."""
    return [
        _level(JOIN_LEVEL, JOIN_SHARES, JOIN_LENDABLE_PERCENT),
        _schema(
            JOIN_LEVEL,
            JOIN_MATCHING_PRECEDENCE,
            [
                _rule(
                    BOOTSTRAPPERS_GROUP,
                    ["create", "get", "list", "watch"],
                    "certificates.k8s.io",
                    "certificatesigningrequests",
                ),
                _rule(NODES_GROUP, ["create"], "", "nodes"),
            ],
        ),
    ]


def objects() -> list[dict[str, Any]]:
    return [*service_account_lists(), *node_joins()]
