"""API Priority and Fairness: a fenced-off lane for LISTs made by service accounts.

Both outages the OpenAI posts trace to the API were per-node agents: Fluentd and Datadog LISTing
Events from every node (2,500-node post), and a telemetry DaemonSet whose calls scaled with the
cluster (OpenAI's December 2024 incident). Every pod of a DaemonSet runs as the same service
account, so with ``ByUser`` flows one DaemonSet is one flow, however many nodes it runs on; fair
queuing then bounds it to its share of this level, and the level can neither lend nor borrow
seats, so kubelets, controllers and people keep theirs.

Matched after the built-in ``kube-system-service-accounts`` schema (precedence 900), so the
controllers and the autoscaler in kube-system keep ``workload-high``; before the built-in
``service-accounts`` schema (9000). The built-in levels have 245 nominal shares in total; with
these 20, the level gets 20/265 of each apiserver's seats (``--max-requests-inflight`` plus
``--max-mutating-requests-inflight``): about 300 of 4,000 at 7,500 nodes, where a LIST costs 1-10.
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


def seats(total_seats: int) -> int:
    """This level's nominal seats on an apiserver with ``total_seats``."""
    return -(-total_seats * NOMINAL_CONCURRENCY_SHARES // (BUILTIN_SHARES + NOMINAL_CONCURRENCY_SHARES))


def objects() -> list[dict[str, Any]]:
    level = {
        "apiVersion": API_VERSION,
        "kind": "PriorityLevelConfiguration",
        "metadata": {"name": LEVEL},
        "spec": {
            "type": "Limited",
            "limited": {
                "nominalConcurrencyShares": NOMINAL_CONCURRENCY_SHARES,
                "lendablePercent": 0,
                "borrowingLimitPercent": 0,
                "limitResponse": {
                    "type": "Queue",
                    "queuing": {"queues": QUEUES, "handSize": HAND_SIZE, "queueLengthLimit": QUEUE_LENGTH_LIMIT},
                },
            },
        },
    }
    schema = {
        "apiVersion": API_VERSION,
        "kind": "FlowSchema",
        "metadata": {"name": LEVEL},
        "spec": {
            "priorityLevelConfiguration": {"name": LEVEL},
            "matchingPrecedence": MATCHING_PRECEDENCE,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [
                {
                    "subjects": [{"kind": "Group", "group": {"name": "system:serviceaccounts"}}],
                    "resourceRules": [
                        {
                            "verbs": ["list"],
                            "apiGroups": ["*"],
                            "resources": ["*"],
                            "clusterScope": True,
                            "namespaces": ["*"],
                        }
                    ],
                }
            ],
        },
    }
    return [level, schema]
