"""The etcd runbooks (docs/runbooks/etcd*.md) name the paths, names and numbers the machines actually use."""

from __future__ import annotations

import pytest

from infra.etcd import backup, backup_metrics
from infra.etcd.member_machine import BACKUP_UNIT, METRICS_UNIT, NEW_CLUSTER_OVERRIDE_PATH, TOOL_SETTINGS_PATH
from infra.etcd.membership_change import RUNBOOK
from plan.stackfile import PROJECT_DIR

RUNBOOKS = PROJECT_DIR / "docs" / "runbooks"

FACTS = {
    # How a member starts, shared by every etcd runbook (and named by etcd-member's refusal).
    "etcd.md": (
        TOOL_SETTINGS_PATH,
        NEW_CLUSTER_OVERRIDE_PATH,
        backup.FORMED_MARKER,
        backup.SNAPSHOT_PREFIX,
    ),
    "etcd-quorum-lost.md": (
        NEW_CLUSTER_OVERRIDE_PATH,
        backup.SNAPSHOT_PREFIX,
        f"{backup.RESTORE_REVISION_BUMP:,}",
    ),
    "etcd-backups-stale.md": (
        backup_metrics.LAST_SUCCESS_METRIC,
        backup_metrics.LAST_ATTEMPT_METRIC,
        f"port {backup_metrics.METRICS_PORT}",
        f"every {backup.SNAPSHOT_INTERVAL_MINUTES} minutes",
        f"older than {backup.TAKEOVER_AFTER_SECONDS // 60} minutes",
        f"journalctl -u {BACKUP_UNIT.removesuffix('.service')}",
        f"journalctl -u {METRICS_UNIT.removesuffix('.service')}",
        *(f'"{label}"' for label in backup.METRICS_CLUSTER_LABELS.values()),
    ),
}


@pytest.mark.parametrize("page", sorted(FACTS))
def test_the_runbook_names_what_the_machines_use(page):
    text = (RUNBOOKS / page).read_text()
    for fact in FACTS[page]:
        assert fact in text, fact


def test_the_membership_check_names_a_runbook_section_that_exists():
    page, _, section = RUNBOOK.partition(", ")
    assert f"## {section.strip(chr(34))}\n" in (PROJECT_DIR / page).read_text()
