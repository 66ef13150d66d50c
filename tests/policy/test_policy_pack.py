"""The policy pack on the real plans: dev and prod pass, and a seeded violation of each rule is caught."""

from __future__ import annotations

import copy

import pytest

from plan.diff import SCALE_SET_TYPE, VM_TYPE
from plan.stackfile import PROJECT_DIR
from policypack.rules import POLICIES
from tests.helpers import load_yaml
from tests.policy.analyzer import PACK_DIR, analyze, pack

# The second stage of scripts/test.sh (tens of seconds): the policy pack run on planned stacks.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served():
    with pack() as stub:
        yield stub


def resources(run) -> list[dict]:
    return [copy.deepcopy(r.as_json()) for r in run.registrations]


@pytest.fixture(params=["dev", "prod"])
def stack_resources(request, dev_plan, prod_plan):
    return resources({"dev": dev_plan, "prod": prod_plan}[request.param])


def test_the_real_plans_pass_every_policy(served, stack_resources):
    assert analyze(served, stack_resources) == []


def _first(items, typ, where=lambda r: True):
    return next(r for r in items if r["type"] == typ and where(r))


def _role(resource):
    return (resource["inputs"].get("tags") or {}).get("supercluster.io_role")


def unprotect_an_etcd_member(items):
    _first(items, VM_TYPE, lambda r: _role(r) == "etcd")["options"]["protect"] = False


def unprotect_the_key_vault(items):
    _first(items, "azure-native:keyvault:Vault")["options"]["protect"] = False


def ignore_scale_set_capacity(items):
    _first(items, SCALE_SET_TYPE)["options"]["ignoreChanges"].append("sku.capacity")


def add_a_public_ip(items):
    nic = _first(items, "azure-native:network:NetworkInterface")
    nic["inputs"]["ipConfigurations"][0]["publicIPAddress"] = {"id": "/subscriptions/x/publicIPAddresses/pip"}


def give_scale_set_instances_public_ips(items):
    nic = _first(items, SCALE_SET_TYPE)["inputs"]["virtualMachineProfile"]["networkProfile"]
    nic["networkInterfaceConfigurations"][0]["ipConfigurations"][0]["publicIPAddressConfiguration"] = {"name": "p"}


def roll_two_nat_hosts_at_once(items):
    for vm in [r for r in items if r["type"] == VM_TYPE and _role(r) == "nat-host"][:2]:
        vm["options"]["ignoreChanges"].remove("osProfile.customData")


def let_an_etcd_member_take_its_cloud_init(items):
    _first(items, VM_TYPE, lambda r: _role(r) == "events-etcd")["options"]["ignoreChanges"].remove(
        "osProfile.customData"
    )


SEEDED = {
    unprotect_an_etcd_member: "protected-stateful-resources",
    unprotect_the_key_vault: "protected-stateful-resources",
    ignore_scale_set_capacity: "scale-set-capacity-never-sent",
    add_a_public_ip: "no-public-ips",
    give_scale_set_instances_public_ips: "no-public-ips",
    roll_two_nat_hosts_at_once: "no-machine-wide-restarts",
    let_an_etcd_member_take_its_cloud_init: "no-machine-wide-restarts",
}


def test_every_policy_has_a_seeded_violation():
    assert {policy.name for policy in POLICIES} == set(SEEDED.values())


@pytest.mark.parametrize("seed", list(SEEDED), ids=lambda seed: seed.__name__)
def test_a_seeded_violation_is_caught(seed, served, prod_plan):
    items = resources(prod_plan)
    seed(items)
    assert {v.policy for v in analyze(served, items)} == {SEEDED[seed]}


def test_the_cli_runs_the_pack_from_the_projects_venv():
    """The CLI reads PulumiPolicy.yaml: a Python pack run from the venv setup.sh and the workflows fill from
    requirements.lock, which locks the pulumi-policy pinned in requirements.in."""
    manifest = load_yaml((PACK_DIR / "PulumiPolicy.yaml").read_text())
    assert manifest["runtime"]["name"] == "python"
    assert (PACK_DIR / manifest["runtime"]["options"]["virtualenv"]).resolve() == (PROJECT_DIR / ".venv").resolve()
    assert "pulumi-policy==" in (PROJECT_DIR / "requirements.in").read_text()
    assert "pulumi-policy==" in (PROJECT_DIR / "requirements.lock").read_text()
