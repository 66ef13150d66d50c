"""The outputs contract without Pulumi: the schema, the producer's document, and the reader's checks."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from infra.assembly.stack_output import cluster_contract, shard_names
from infra.cluster.cluster_spec import build_cluster_spec
from infra.contract import (
    SCHEMA_MAJOR,
    SCHEMA_VERSION,
    ClusterContract,
    ContractError,
    describe,
    parse_contract,
    secret_paths,
    to_document,
)
from tests.helpers import raw_config

SOURCE = "stack organization/supercluster/dev"
SUB = "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/dev-rg/providers"
CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

# Contract 2.0 as other teams are promised it. Removing or renaming any of these is a new
# major version (and a change to this list); a minor version may only add optional fields.
# 2.0 is 1.0 without `adminKubeconfig`: no output hands out a credential.
CONTRACT_2_0 = [
    "schemaVersion",
    "clusterName",
    "location",
    "resourceGroupName",
    "kubernetesVersion",
    "network.vnetIds",
    "network.subnetIds",
    "network.podCidrs",
    "network.serviceCidr",
    "network.dnsServiceIp",
    "network.natFrontendIp",
    "apiserver.endpoint",
    "apiserver.caCertificate",
    "nodePools.<name>.role",
    "nodePools.<name>.vmSize",
    "nodePools.<name>.minNodes",
    "nodePools.<name>.maxNodes",
    "nodePools.<name>.retired",
    "nodePools.<name>.shards[].name",
    "nodePools.<name>.shards[].scaleSetId",
    "nodePools.<name>.shards[].subnetId",
    "etcdBackup.storageAccountId",
    "etcdBackup.containerUrl",
]


def dev_spec(**changes):
    raw = raw_config("dev")
    raw.update(changes)
    return build_cluster_spec(raw, "eastus")


def contract_for(spec) -> ClusterContract:
    """What the producer exports once every component has created its resources (ids stand in)."""
    keys = ["system"] + [pool.name for pool in spec.config.node_pools]
    subnets = [s.key for v in spec.addresses.vnets for s in v.subnets]
    return cluster_contract(
        spec,
        resource_group_name="dev-rg",
        vnet_ids={k: f"{SUB}/Microsoft.Network/virtualNetworks/dev-{k}-vnet" for k in keys},
        subnet_ids={k: f"{SUB}/Microsoft.Network/virtualNetworks/x/subnets/{k}" for k in subnets},
        scale_set_ids={n: f"{SUB}/Microsoft.Compute/virtualMachineScaleSets/dev-{n}" for n in shard_names(spec)},
        ca_certificate=CA,
        etcd_backup_storage_account_id=f"{SUB}/Microsoft.Storage/storageAccounts/devetcd",
        etcd_backup_container_url="https://devetcd.blob.core.windows.net/etcd-snapshots",
    )


@pytest.fixture
def document():
    return to_document(contract_for(dev_spec()))


def drop(document: dict, path: str) -> dict:
    """A copy of ``document`` without the field at a describe()-style path (first map entry / list item)."""
    broken = copy.deepcopy(document)
    node, parts = broken, path.split(".")
    for part in parts[:-1]:
        if part == "<name>":
            node = next(iter(node.values()))
        elif part.endswith("[]"):
            node = node[part[:-2]][0]
        else:
            node = node[part]
    del node[parts[-1]]
    return broken


def test_schema_still_holds_every_field_of_2_0_and_no_secret():
    paths = [path for path, _, _ in describe()]
    assert SCHEMA_MAJOR == 2 and SCHEMA_VERSION.startswith("2.")
    assert [p for p in paths if p in CONTRACT_2_0] == CONTRACT_2_0
    since = {f"{prefix}": f.metadata["since"] for prefix, f in _leaf_fields(ClusterContract)}
    added_later = [p for p in paths if p not in CONTRACT_2_0]
    assert all(since[p] > 0 for p in added_later), "fields added after 2.0 must be optional (since > 0)"
    assert secret_paths() == []  # nothing in the output is a credential
    assert not any("kubeconfig" in p.lower() or "key" in p.lower().split(".")[-1] for p in paths)


def _leaf_fields(schema, prefix=""):
    from infra.contract import ListOf, MapOf

    for field in dataclasses.fields(schema):
        path, kind = f"{prefix}{field.metadata['key']}", field.metadata["kind"]
        if isinstance(kind, type):
            yield from _leaf_fields(kind, f"{path}.")
        elif isinstance(kind, MapOf) and isinstance(kind.value, type):
            yield from _leaf_fields(kind.value, f"{path}.<name>.")
        elif isinstance(kind, ListOf) and isinstance(kind.item, type):
            yield from _leaf_fields(kind.item, f"{path}[].")
        else:
            yield path, field


def test_producer_document_round_trips(document):
    contract = parse_contract(document, SOURCE)
    assert contract == contract_for(dev_spec())
    assert document["schemaVersion"] == SCHEMA_VERSION


def test_planned_values_come_from_config_and_address_plan(document):
    spec = dev_spec()
    contract = parse_contract(document, SOURCE)
    assert contract.apiserver.endpoint == f"https://{spec.addresses.apiserver_lb_ip()}:6443"
    assert contract.network.nat_frontend_ip == spec.addresses.nat_lb_ip() == "10.64.0.100"
    assert contract.network.service_cidr == "172.20.0.0/20"
    assert contract.network.dns_service_ip == "172.20.0.10"
    assert contract.network.pod_cidrs == {
        "gpu": str(spec.addresses.vnet("gpu").address_space),
        "cpu": str(spec.addresses.vnet("cpu").address_space),
        "platform": str(spec.addresses.vnet("platform").address_space),
    }
    cpu = contract.node_pools["cpu"]
    assert (cpu.role, cpu.min_nodes, cpu.max_nodes, cpu.retired) == ("cpu", 1, 3, False)
    assert [s.name for s in cpu.shards] == ["cpu-s000"]
    assert cpu.shards[0].subnet_id.endswith("/subnets/cpu-s000")
    assert cpu.shards[0].scale_set_id.endswith("/virtualMachineScaleSets/dev-cpu-s000")


def test_retired_pool_is_listed_with_no_capacity():
    pools = raw_config("dev")["nodePools"]
    pools[0]["retired"] = True
    contract = contract_for(dev_spec(nodePools=pools))
    assert contract.node_pools["gpu"].retired
    assert (contract.node_pools["gpu"].min_nodes, contract.node_pools["gpu"].max_nodes) == (0, 0)
    assert [s.name for s in contract.node_pools["gpu"].shards] == ["gpu-s000"]


def test_producer_refuses_scale_set_ids_that_do_not_match_the_shards():
    spec = dev_spec()
    with pytest.raises(ValueError, match=r"missing \['gpu-s000', 'platform-s000'\], unexpected \['gpu-s001'\]"):
        cluster_contract(
            spec,
            resource_group_name="rg",
            vnet_ids={},
            subnet_ids={},
            scale_set_ids={"cpu-s000": "id", "gpu-s001": "id"},
            ca_certificate=CA,
            etcd_backup_storage_account_id="a",
            etcd_backup_container_url="u",
        )


@pytest.mark.parametrize("path", CONTRACT_2_0[1:])
def test_dropping_any_field_fails_with_its_path(document, path):
    with pytest.raises(ContractError) as error:
        parse_contract(drop(document, path), SOURCE)
    message = str(error.value)
    assert message.startswith(SOURCE)
    shown = "cluster." + path.replace(".<name>.", ".gpu.", 1).replace("[].", "[0].")
    assert f"{shown}: missing" in message


def test_missing_output_is_a_clear_error():
    with pytest.raises(ContractError, match=rf"^{SOURCE}: no `cluster` output; is it a supercluster stack"):
        parse_contract(None, SOURCE)


@pytest.mark.parametrize(
    "version,expected",
    [
        ("3.0", r"contract 3.0 is newer than this reader \(2.x\)"),
        ("1.0", r"contract 1.0 is older than this reader \(2.x\)"),
        ("0.9", r"contract 0.9 is older than this reader \(2.x\)"),
        (None, r"`cluster.schemaVersion` is None, expected \"MAJOR.MINOR\""),
        ("1", r"`cluster.schemaVersion` is '1', expected \"MAJOR.MINOR\""),
    ],
)
def test_other_major_or_no_version_is_refused(document, version, expected):
    document["schemaVersion"] = version
    with pytest.raises(ContractError, match=expected):
        parse_contract(document, SOURCE)


def test_newer_minor_with_unknown_fields_is_read(document):
    document["schemaVersion"] = "2.7"
    document["network"]["someFieldOf17"] = "whatever"
    document["nodePools"]["gpu"]["futureFlag"] = True
    assert parse_contract(document, SOURCE).network.service_cidr == "172.20.0.0/20"


def test_wrong_kinds_name_the_field(document):
    document["network"]["serviceCidr"] = "172.20.0.1/20"
    document["nodePools"]["cpu"]["maxNodes"] = -1
    document["apiserver"]["caCertificate"] = "not a pem"
    with pytest.raises(ContractError) as error:
        parse_contract(document, SOURCE)
    message = str(error.value)
    assert "cluster.network.serviceCidr: '172.20.0.1/20' is not an IPv4 range" in message
    assert "cluster.nodePools.cpu.maxNodes: -1 is not a whole number >= 0" in message
    assert "cluster.apiserver.caCertificate: 'not a pem' is not a PEM certificate" in message


def test_counts_read_back_as_doubles_are_whole_numbers(document):
    document["nodePools"]["cpu"]["maxNodes"] = 3.0  # how a number comes back through the Pulumi engine
    assert parse_contract(document, SOURCE).node_pools["cpu"].max_nodes == 3
    document["nodePools"]["cpu"]["maxNodes"] = 2.5
    with pytest.raises(ContractError, match="maxNodes: 2.5 is not a whole number"):
        parse_contract(document, SOURCE)


def contract_1_0(document: dict, kubeconfig: str = "apiVersion: v1\nkind: Config\n") -> dict:
    """What the release before 2.0 exported: the same fields, plus the admin kubeconfig."""
    return {**copy.deepcopy(document), "schemaVersion": "1.0", "adminKubeconfig": kubeconfig}


def test_the_transition_reader_reads_the_1_0_output_a_stack_last_wrote_and_no_older(document):
    previous = contract_1_0(document)
    read = parse_contract(previous, SOURCE, previous_major=True)
    assert read.network.service_cidr == "172.20.0.0/20" and not hasattr(read, "admin_kubeconfig")
    with pytest.raises(ContractError, match=r"contract 1.0 is older than this reader \(2.x\)"):
        parse_contract(previous, SOURCE)  # a consumer's reader is not the transition's
    with pytest.raises(ContractError, match="does not match contract 1.0: cluster.apiserver.endpoint: missing"):
        parse_contract(drop(previous, "apiserver.endpoint"), SOURCE, previous_major=True)
    previous["schemaVersion"] = "0.9"
    with pytest.raises(ContractError, match=r"contract 0.9 is older than this reader \(2.x\)"):
        parse_contract(previous, SOURCE, previous_major=True)


def test_the_documented_contract_table_is_the_schema():
    from plan.stackfile import PROJECT_DIR

    readme = (PROJECT_DIR / "docs" / "outputs-contract.md").read_text()
    table = readme.split("<!-- contract-table:start -->\n")[1].split("<!-- contract-table:end -->")[0]
    rows = [f"| `{path}` | {kind} | {doc} |" for path, kind, doc in describe()]
    assert table.strip().splitlines()[2:] == rows


def test_the_contract_knows_every_pool_role():
    from infra import contract
    from infra.facts import labels

    assert contract.POOL_ROLES == labels.POOL_ROLES
