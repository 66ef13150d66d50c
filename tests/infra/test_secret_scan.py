"""The plan's secret scan finds what must never be written, and passes what may be."""

from __future__ import annotations

import pytest

from infra.plan.secret_scan import scan_text

LEAKS = {
    "pem key": "-----BEGIN RSA PRIVATE KEY-----\nabc\n",
    "pkcs8 key": "x: |\n  -----BEGIN PRIVATE KEY-----\n",
    "bootstrap token": "token=abcdef.0123456789abcdef",
    "kubeconfig key": "    client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQ==",
    "kubeconfig token": "users:\n- name: x\n  user:\n    token: 0123456789abcdef\n",
    "storage key": "DefaultEndpointsProtocol=https;AccountKey=abcdefghijklmnopqrstuvwxyz0123==",
    "sas": "https://x.blob.core.windows.net/c?sv=2022&sig=abcdefghijklmnopqrstuvwxyz%3D",
    "password": '"password": "hunter2hunter2"',
}


@pytest.mark.parametrize("text", LEAKS.values(), ids=LEAKS.keys())
def test_leaks_are_found(text):
    assert scan_text("f", text)


@pytest.mark.parametrize("text", [
    "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    '"value": "[secret]"',
    "fetch node-bootstrap-token /etc/kubernetes/bootstrap-token 0600",
    "10.0.0.0/8 image: registry.k8s.io/pause:3.10",
])
def test_public_material_and_secret_names_pass(text):
    assert scan_text("f", text) == []


def test_real_plans_are_clean(dev_plan, prod_plan):
    from infra.plan.artifacts import plan_files
    from infra.plan.secret_scan import scan_files

    for run in (dev_plan, prod_plan):
        files = plan_files(run.registrations, run.outputs, "")
        assert any(path.endswith("cloud-init.yaml") for path in files)
        assert scan_files(files) == []
