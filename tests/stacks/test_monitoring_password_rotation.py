"""Rotating the monitoring stack's passwords (``addons.monitoring.passwordRotation``) is one deploy that makes new
ones, hands them to the cluster, and restarts only what reads them at start
(docs/runbooks/rotate-monitoring-passwords.md).
"""

from __future__ import annotations

import pytest

from infra.addons.monitoring import credential, grafana
from plan.artifacts import kubernetes_object
from plan.diff import diff_plans
from tests.conftest import as_plan, deploy_after

pytestmark = pytest.mark.slow  # two whole-program runs (seconds)


def _object(run, kind: str, name: str) -> dict:
    (found,) = [
        o
        for o in map(kubernetes_object, run.registrations)
        if o is not None and (o["kind"], o["metadata"]["name"]) == (kind, name)
    ]
    return found


def test_a_rotation_replaces_both_passwords_changes_the_secret_and_restarts_grafana_alone(dev_plan):
    """On the design before this no key made new passwords: the program declared two RandomPasswords with nothing that
    could ever replace them, so a leaked password stayed valid for the cluster's life."""
    before = deploy_after(dev_plan)
    rotated = deploy_after(dev_plan, "addons.monitoring.passwordRotation=1")
    diff = diff_plans(as_plan(before), as_plan(rotated))
    changed = sorted((c.action, c.type.rsplit(":", 1)[-1], c.name.removeprefix("dev-")) for c in diff.resources)
    assert changed == [
        # New values, and with them the random provider's new bcrypt hash of the API password.
        ("replace", "RandomPassword", "monitoring-access-api-password"),
        ("replace", "RandomPassword", "monitoring-access-grafana-admin-password"),
        # Grafana reads both passwords only at start; every other reader re-reads the files and is not restarted.
        ("update", "Deployment", "addons-deployment-monitoring-grafana"),
        # The one Secret every reader mounts: its data is the new generation's.
        ("update", "Secret", "monitoring-access-secret"),
    ]
    secret = _object(rotated, "Secret", credential.SECRET)
    assert credential.rotation_key(1) in secret["stringData"]
    assert credential.rotation_key(0) not in secret["stringData"]
    pod = _object(rotated, "Deployment", grafana.NAME)["spec"]["template"]["spec"]
    assert credential.grafana_volume(1) in pod["volumes"]
    # The kubelet starts the new Grafana only once the Secret holds the new generation's key (no optional volume).
    assert "optional" not in credential.grafana_volume(1)["secret"]


def test_no_rotation_keeps_the_passwords_made_before_the_key_existed(dev_plan):
    """A deploy that never set the key declares the passwords exactly as before (no keeper), so upgrading to this
    release rotates nothing."""
    for run in (dev_plan, deploy_after(dev_plan, "addons.monitoring.passwordRotation=0")):
        passwords = [
            r for r in run.of_type("random:index/randomPassword:RandomPassword") if "monitoring-access" in r.name
        ]
        assert len(passwords) == 2 and all("keepers" not in r.inputs for r in passwords)
