"""The real stacks export the ``cluster`` contract, with the stack's own values and no credential."""

from __future__ import annotations

import pytest

from infra.contract import OUTPUT_NAME, parse_contract
from plan.mocks import SECRET
from tests.helpers import cluster_subnets


@pytest.fixture(params=["dev", "prod"])
def stack_plan(request, dev_plan, prod_plan):
    return {"dev": dev_plan, "prod": prod_plan}[request.param]


def test_stack_exports_the_contract(stack_plan):
    contract = parse_contract(stack_plan.outputs[OUTPUT_NAME], f"{stack_plan.stack} plan", secret_placeholder=SECRET)
    assert contract.cluster_name == stack_plan.stack
    assert SECRET not in str(stack_plan.outputs[OUTPUT_NAME]), "contract 2.0 holds nothing secret"
    exported = sorted(shard.scale_set_id for pool in contract.node_pools.values() for shard in pool.shards)
    declared = sorted(r.id for r in stack_plan.node_scale_sets())
    assert exported == declared, "every scale set, and only those, is in the contract with its id"
    vnets = {
        r.inputs["virtualNetworkName"]: r.id
        for r in stack_plan.of_type("azure-native:network:VirtualNetwork")
        if "-hub" not in r.name
    }
    assert sorted(contract.network.vnet_ids.values()) == sorted(vnets.values())


def test_contract_ids_are_the_declared_resources(dev_plan):
    contract = parse_contract(dev_plan.outputs[OUTPUT_NAME], "dev plan", secret_placeholder=SECRET)
    assert contract.resource_group_name == "dev-rg"
    # dev creates its hub too; the hub's subnets are not the cluster's.
    subnets = {name: f"{vnet.id}/subnets/{name}" for name, (vnet, _) in cluster_subnets(dev_plan).items()}
    assert contract.network.subnet_ids == subnets
    assert [s.subnet_id for s in contract.node_pools["cpu"].shards] == [subnets["cpu-s000"]]
    backups = dev_plan.of_type("azure-native:storage:StorageAccount")
    assert contract.etcd_backup.storage_account_id in {r.id for r in backups}
