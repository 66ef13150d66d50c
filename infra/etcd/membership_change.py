"""etcd membership changes by one member per deploy, checked against the last deploy.

A new member joins through ``etcdctl member add`` (the member tool, on its first boot). An added
member counts towards the quorum before it has started, so two added at once leave the cluster
one failure closer to losing it; etcd's guide modifies members "one at a time" (etcd
op-guide/runtime-configuration, "Cycle or upgrade multiple machines"). Shrinking is the same in
reverse: the runbook removes the highest member from the membership, then one deploy deletes
its VM. So ``etcd.members`` (and
``eventsEtcd.members``) may move by at most one per deploy, and an even count is accepted only
as the step in between two odd ones: it adds no fault tolerance to stay on.

What the last deploy ran comes from its stack outputs (each cluster's client URLs, one per
member), read by ``infra.assembly.desired_cluster.check_last_deploy`` as the pool-retirement check does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infra.config.cluster_config import ClusterConfig
from infra.config.errors import ConfigError
from infra.etcd.spec import EVENTS, MAIN

# The stack outputs listing each cluster's members (``__main__.py`` exports them).
CLIENT_URL_OUTPUTS = {MAIN: "etcdClientUrls", EVENTS: "eventsEtcdClientUrls"}
# The config key of each cluster's member count.
MEMBERS_KEYS = {MAIN: "etcd.members", EVENTS: "eventsEtcd.members"}
RUNBOOK = 'docs/runbooks/etcd-rolling-change.md, "Growing or shrinking a cluster"'


def previous_members(outputs: Mapping[str, Any]) -> dict[str, int]:
    """``{role: member count}`` of the last deploy, from its outputs; a role it did not export (the
    first deploy) is left out."""
    counts = {}
    for role, name in CLIENT_URL_OUTPUTS.items():
        urls = outputs.get(name)
        if isinstance(urls, (list, tuple)) and urls:
            counts[role] = len(urls)
    return counts


def configured_members(config: ClusterConfig) -> dict[str, int]:
    return {MAIN: config.etcd.members, EVENTS: config.events_etcd.members}


def check_member_changes(outputs: Mapping[str, Any], config: ClusterConfig) -> None:
    """Refuses a member count more than one away from the last deploy's, and an even count that is
    not such a one-member step."""
    before = previous_members(outputs)
    for role, wanted in configured_members(config).items():
        key = MEMBERS_KEYS[role]
        previous = before.get(role)
        if previous is not None and abs(wanted - previous) > 1:
            step = previous + (1 if wanted > previous else -1)
            raise ConfigError(
                key,
                wanted,
                f"at most one member more or fewer than the last deploy's {previous} "
                f"(deploy {step} first, then the next; {RUNBOOK})",
            )
        if wanted % 2 == 0 and (previous is None or abs(wanted - previous) != 1):
            raise ConfigError(
                key,
                wanted,
                f"an odd number of members (1, 3, 5 or 7); an even count only as the "
                f"one-member step between two odd ones ({RUNBOOK})",
            )
