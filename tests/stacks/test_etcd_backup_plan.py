"""The backup account's lifecycle rule, as the plan sends it: it ages out snapshots, never the marker
that tells a member the cluster existed (infra/etcd/backup.py)."""

from __future__ import annotations

from infra.etcd.backup import FORMED_MARKER, SNAPSHOT_PREFIX
from infra.etcd.spec import ROLES


def test_the_lifecycle_rule_deletes_snapshots_only(dev_plan):
    [policy] = dev_plan.of_type("azure-native:storage:ManagementPolicy")
    [rule] = policy.inputs["policy"]["rules"]
    prefixes = rule["definition"]["filters"]["prefixMatch"]
    containers = [
        c.inputs["containerName"]
        for c in dev_plan.of_type("azure-native:storage:BlobContainer")
        if c.inputs["containerName"] in ROLES
    ]
    assert sorted(containers) == sorted(ROLES)
    for container in containers:
        # Azure matches a prefix against "<container>/<blob name>".
        assert any(f"{container}/{SNAPSHOT_PREFIX}20260101T000000Z-m.db".startswith(p) for p in prefixes)
        assert not any(f"{container}/{FORMED_MARKER}".startswith(p) for p in prefixes)
