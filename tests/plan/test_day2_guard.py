"""The plan diff speaks up (issue 16.3): more than one control-plane, etcd or NAT machine down in one
deploy, or a capacity sent to a live scale set, exits 4 with a CAUTION line naming the machines.

Synthetic plans in the shape the program records (``plan.mocks.Registration.as_json``), so each
test changes exactly one thing."""

from __future__ import annotations

import copy

import pytest

from infra.day2.deploy_rules import ETCD_ROLES, MACHINE_ROLE_TAG
from infra.etcd.spec import EVENTS, MAIN
from plan.__main__ import EXIT_CHANGED, EXIT_DANGER, exit_code
from plan.diff import SCALE_SET_TYPE, VM_TYPE, Plan, diff_plans
from plan.diff_report import render_diff


def vm(name: str, role: str, *, size="Standard_E16ds_v5", custom_data="v1", ignore_custom_data=False) -> dict:
    return {
        "urn": f"urn:pulumi:dev::supercluster::{VM_TYPE}::{name}",
        "id": name,
        "type": VM_TYPE,
        "name": name,
        "parent": None,
        "dependencies": [],
        "inputs": {
            "vmName": name,
            "resourceGroupName": "dev-rg",
            "hardwareProfile": {"vmSize": size},
            "osProfile": {"customData": custom_data},
            "tags": {MACHINE_ROLE_TAG: role},
        },
        "options": {
            "protect": False,
            "ignoreChanges": ["osProfile.customData"] if ignore_custom_data else [],
            "replaceOnChanges": [],
            "aliases": [],
        },
    }


def scale_set(name: str, *, capacity: int | None, model="v1") -> dict:
    sku = {"name": "Standard_D16ds_v5", **({} if capacity is None else {"capacity": capacity})}
    return {
        "urn": f"urn:pulumi:dev::supercluster::{SCALE_SET_TYPE}::{name}",
        "id": name,
        "type": SCALE_SET_TYPE,
        "name": name,
        "parent": None,
        "dependencies": [],
        "inputs": {
            "vmScaleSetName": name,
            "resourceGroupName": "dev-rg",
            "sku": sku,
            "virtualMachineProfile": {"osProfile": {"customData": model}},
        },
        "options": {
            "protect": True,
            "ignoreChanges": ["sku.capacity"] if capacity is not None else [],
            "replaceOnChanges": [],
            "aliases": [],
        },
    }


def plan(*resources: dict) -> Plan:
    return Plan({r["urn"]: r for r in resources}, {}, {})


def changed(resource: dict, path: tuple[str, ...], value) -> dict:
    resource = copy.deepcopy(resource)
    target = resource["inputs"]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return resource


def test_the_etcd_roles_are_the_etcd_clusters_roles():
    assert ETCD_ROLES == (MAIN, EVENTS)


def test_resizing_every_apiserver_in_place_exits_4_naming_each_one():
    old = [vm(f"dev-apiserver-{i}", "apiserver") for i in range(3)]
    new = [changed(r, ("hardwareProfile", "vmSize"), "Standard_E32ds_v5") for r in old]
    diff = diff_plans(plan(*old), plan(*new))
    assert exit_code(diff) == EXIT_DANGER
    report = render_diff("dev", "old", diff)
    caution = report.split("> [!CAUTION]", 1)[1].split("\n\n", 1)[0]
    for i in range(3):
        assert f"dev-apiserver-{i} restarted (hardwareProfile.vmSize)" in caution
    assert "3 apiserver machines go down in one deploy" in caution


def test_one_apiserver_resized_is_a_plain_change():
    old = [vm(f"dev-apiserver-{i}", "apiserver") for i in range(3)]
    new = [changed(old[0], ("hardwareProfile", "vmSize"), "Standard_E32ds_v5"), *old[1:]]
    assert exit_code(diff_plans(plan(*old), plan(*new))) == EXIT_CHANGED


@pytest.mark.parametrize("role", ["nat-host", "etcd", "events-etcd"])
def test_replacing_two_machines_of_a_role_exits_4(role):
    old = [vm(f"dev-{role}-{i}", role) for i in range(3)]
    new = [changed(r, ("osProfile", "customData"), "v2") for r in old[:2]] + old[2:]  # customData is create-only
    diff = diff_plans(plan(*old), plan(*new))
    assert exit_code(diff) == EXIT_DANGER
    assert {c.name for c in diff.dangers} == {f"dev-{role}-0", f"dev-{role}-1"}
    assert all(f"2 {role} machines go down" in c.danger for c in diff.dangers)


def test_an_ignored_cloud_init_change_takes_nothing_down():
    old = [vm(f"dev-nat-host-{i}", "nat-host", ignore_custom_data=True) for i in range(3)]
    new = [changed(r, ("osProfile", "customData"), "v2") for r in old]
    assert exit_code(diff_plans(plan(*old), plan(*new))) == EXIT_CHANGED


def test_machines_of_different_roles_are_counted_apart():
    old = [vm("dev-apiserver-0", "apiserver"), vm("dev-nat-host-0", "nat-host")]
    new = [changed(r, ("hardwareProfile", "vmSize"), "Standard_E32ds_v5") for r in old]
    assert exit_code(diff_plans(plan(*old), plan(*new))) == EXIT_CHANGED


def test_a_model_update_that_carries_the_stored_capacity_exits_4():
    """``ignoreChanges: [sku.capacity]`` sends the value in the state (the creation-time capacity) with every
    update: the autoscaler's nodes above it are deleted."""
    old = scale_set("dev-pool-gpu-s000", capacity=0)
    new = changed(old, ("virtualMachineProfile", "osProfile", "customData"), "v2")
    diff = diff_plans(plan(old), plan(new))
    assert exit_code(diff) == EXIT_DANGER
    [danger] = diff.dangers
    assert "sends sku.capacity=0 to a live scale set" in danger.danger
    assert "`dev-pool-gpu-s000`" in render_diff("dev", "old", diff).split("> [!CAUTION]", 1)[1]


def test_a_model_update_without_capacity_leaves_the_pool_alone():
    old = scale_set("dev-pool-gpu-s000", capacity=None)
    new = changed(old, ("virtualMachineProfile", "osProfile", "customData"), "v2")
    assert exit_code(diff_plans(plan(old), plan(new))) == EXIT_CHANGED


def test_a_new_scale_set_may_carry_its_initial_capacity():
    assert exit_code(diff_plans(plan(), plan(scale_set("dev-pool-gpu-s001", capacity=2)))) == EXIT_CHANGED
