"""The real stacks export the ``cluster`` contract, secrets redacted, with the stack's own values."""

from __future__ import annotations

import runpy

import pytest

from infra.contract import OUTPUT_NAME, parse_contract
from infra.plan.mocks import SECRET
from infra.plan.runner import run_declarations
from infra.plan.stackfile import PROJECT_DIR, load_stack_config
from tests.infra.test_contract import CA, SUB


@pytest.fixture(params=["dev", "prod"])
def stack_plan(request, dev_plan, prod_plan):
    return {"dev": dev_plan, "prod": prod_plan}[request.param]


def test_stack_exports_the_contract(stack_plan):
    if OUTPUT_NAME not in stack_plan.outputs:
        pytest.skip("__main__.export_contract is not called yet (it needs node pools, control plane and etcd)")
    contract = parse_contract(stack_plan.outputs[OUTPUT_NAME], f"{stack_plan.stack} plan", secret_placeholder=SECRET)
    assert contract.cluster_name == stack_plan.stack
    assert contract.admin_kubeconfig == SECRET
    exported = sorted(shard.scale_set_id for pool in contract.node_pools.values() for shard in pool.shards)
    declared = sorted(r.id for r in stack_plan.of_type("azure-native:compute:VirtualMachineScaleSet"))
    assert exported == declared, "every scale set, and only those, is in the contract with its id"
    assert contract.network.vnet_ids == stack_plan.outputs["vnetIds"]


def test_main_exports_the_contract_from_its_own_resources():
    """__main__.export_contract with the values the control plane and etcd will pass, standing in."""
    def program():
        main = runpy.run_path(str(PROJECT_DIR / "__main__.py"), run_name="__main__")
        main["export_contract"](
            ca_certificate=CA, admin_kubeconfig="apiVersion: v1\nkind: Config\n",
            etcd_backup_storage_account_id=f"{SUB}/Microsoft.Storage/storageAccounts/devetcd",
            etcd_backup_container_url="https://devetcd.blob.core.windows.net/etcd-snapshots")

    run = run_declarations(program, stack="dev", config=load_stack_config("dev"))
    contract = parse_contract(run.outputs[OUTPUT_NAME], "dev plan", secret_placeholder=SECRET)
    assert contract.resource_group_name == "dev-rg"
    assert contract.network.vnet_ids == run.outputs["vnetIds"]
    subnets = {r.inputs["subnetName"]: r.id for r in run.of_type("azure-native:network:Subnet")}
    assert contract.network.subnet_ids == subnets
    assert [s.subnet_id for s in contract.node_pools["cpu"].shards] == [subnets["cpu-s000"]]
    scale_sets = {r.inputs["vmScaleSetName"]: r.id for r in run.of_type("azure-native:compute:VirtualMachineScaleSet")}
    exported = {s.scale_set_id for pool in contract.node_pools.values() for s in pool.shards}
    assert exported == set(scale_sets.values()) and len(exported) == len(scale_sets) == 2
