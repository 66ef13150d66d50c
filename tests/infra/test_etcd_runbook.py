"""docs/runbooks/etcd.md names the paths, names and numbers the machines actually use."""

from __future__ import annotations

from infra.etcd import backup, backup_metrics
from infra.etcd.machine import BACKUP_UNIT, METRICS_UNIT, NEW_CLUSTER_OVERRIDE_PATH, TOOL_SETTINGS_PATH
from plan.stackfile import PROJECT_DIR


def test_the_runbook_names_what_the_machines_use():
    text = (PROJECT_DIR / "docs" / "runbooks" / "etcd.md").read_text()
    for fact in (
        NEW_CLUSTER_OVERRIDE_PATH,
        backup.FORMED_MARKER,
        backup.SNAPSHOT_PREFIX,
        TOOL_SETTINGS_PATH,
        backup_metrics.LAST_SUCCESS_METRIC,
        backup_metrics.LAST_ATTEMPT_METRIC,
        f"port {backup_metrics.METRICS_PORT}",
        f"every {backup.SNAPSHOT_INTERVAL_MINUTES} minutes",
        f"older than {backup.TAKEOVER_AFTER_SECONDS // 60} minutes",
        f"journalctl -u {BACKUP_UNIT.removesuffix('.service')}",
        f"journalctl -u {METRICS_UNIT.removesuffix('.service')}",
        *(f'"{label}"' for label in backup.METRICS_CLUSTER_LABELS.values()),
    ):
        assert fact in text, fact
