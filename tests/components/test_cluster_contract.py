"""Contract tests on both sides under mocks: what the producer exports is what a consumer's
program, built with ``ClusterReference``, can read; anything else fails with a clear message."""

from __future__ import annotations

import base64
import json
import subprocess
import sys

import pulumi
import pulumi_azure_native as azure
import pytest

from components.cluster_outputs import export_cluster_contract
from components.cluster_reference import ClusterReference
from components.network import ClusterNetwork
from infra.assembly.stack_output import shard_names
from infra.contract import parse_contract
from plan.mocks import SECRET
from plan.runner import run_declarations
from plan.stackfile import PROJECT_DIR
from tests.infra.test_contract import CA, SUB, dev_spec, drop

STACK = "organization/supercluster/dev"
# The consumer's own credential entry: an exec plugin of theirs (here a made-up one), never one of ours.
OWN_CREDENTIAL = {
    "exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "team-login", "args": ["get-token"]}
}


def produce() -> dict:
    """Runs the producer against the real network component; ids the other components will pass stand in."""
    spec = dev_spec()

    def program():
        group = azure.resources.ResourceGroup("dev", resource_group_name="dev-rg", location="eastus")
        network = ClusterNetwork(
            "dev",
            plan=spec.addresses,
            resource_group_name=group.name,
            location="eastus",
            hub_prefixes=["10.250.0.0/22"],
            monitoring_pools=(),
        )
        export_cluster_contract(
            spec,
            resource_group_name=group.name,
            vnet_ids=network.vnet_ids,
            subnet_ids=network.subnet_ids,
            scale_set_ids={n: f"{SUB}/Microsoft.Compute/virtualMachineScaleSets/dev-{n}" for n in shard_names(spec)},
            ca_certificate=CA,
            etcd_backup_storage_account_id=f"{SUB}/Microsoft.Storage/storageAccounts/devetcd",
            etcd_backup_container_url="https://devetcd.blob.core.windows.net/etcd-snapshots",
        )

    return run_declarations(program, stack="dev").outputs


@pytest.fixture(scope="module")
def produced() -> dict:
    return produce()


def _values(value):
    if isinstance(value, dict):
        return [v for item in value.values() for v in _values(item)]
    if isinstance(value, list):
        return [v for item in value for v in _values(item)]
    return [value]


def test_producer_output_matches_the_schema_and_holds_no_credential(produced):
    contract = parse_contract(produced["cluster"], "dev plan", secret_placeholder=SECRET)
    assert not hasattr(contract, "admin_kubeconfig") and "adminKubeconfig" not in produced["cluster"]
    assert SECRET not in _values(produced["cluster"]), "nothing in the contract is a secret any more"
    assert not [v for v in _values(produced["cluster"]) if "PRIVATE KEY" in str(v) or "client-key" in str(v)]
    assert contract.resource_group_name == "dev-rg"
    assert set(contract.network.vnet_ids) == {"system", "gpu", "cpu", "platform"}
    assert all(v.startswith("/subscriptions/") for v in contract.network.vnet_ids.values())
    assert {"etcd", "apiserver", "nat", "gpu-s000", "cpu-s000"} <= set(contract.network.subnet_ids)


def published(produced: dict) -> dict:
    """The producer's output as a consumer's StackReference sees it."""
    return dict(produced["cluster"])


def hub_team_program():
    """What the hub team writes: route the service range to the NAT hosts, talk to the API."""
    cluster = ClusterReference("research", STACK)
    azure.network.RouteTable(
        "hub-routes",
        resource_group_name="hub-rg",
        routes=[
            azure.network.RouteArgs(
                name="to-services",
                address_prefix=cluster.service_cidr,
                next_hop_type="VirtualAppliance",
                next_hop_ip_address=cluster.nat_frontend_ip,
            )
        ],
    )
    azure.network.VirtualNetworkPeering(
        "hub-to-system",
        virtual_network_peering_name="to-system",
        virtual_network_name="hub",
        resource_group_name="hub-rg",
        remote_virtual_network=azure.network.SubResourceArgs(id=cluster.vnet_ids.apply(lambda ids: ids["system"])),
    )
    azure.resources.ResourceGroup(
        "kube-client",
        tags={
            "endpoint": cluster.apiserver_endpoint,
            "kubeconfig": cluster.kubeconfig(OWN_CREDENTIAL, name="research"),
            "gpu-shards": cluster.shard_ids("gpu").apply(",".join),
            "backup": cluster.etcd_backup.apply(lambda b: b.container_url),
        },
    )


def test_consumer_reads_every_field_it_uses(produced):
    run = run_declarations(hub_team_program, stack_outputs={STACK: {"cluster": published(produced)}})
    route = run.named("hub-routes").inputs["routes"][0]
    assert (route["addressPrefix"], route["nextHopIpAddress"]) == ("172.20.0.0/20", "10.64.0.100")
    assert (
        run.named("hub-to-system").inputs["remoteVirtualNetwork"]["id"]
        == produced["cluster"]["network"]["vnetIds"]["system"]
    )
    tags = run.named("kube-client").inputs["tags"]
    assert tags["endpoint"] == "https://10.64.0.68:6443"
    # What a consumer gets: the endpoint and the CA, with its own credential; nothing of the cluster's.
    kubeconfig = json.loads(tags["kubeconfig"])
    assert kubeconfig["clusters"][0]["cluster"] == {
        "server": "https://10.64.0.68:6443",
        "certificate-authority-data": base64.b64encode(CA.encode()).decode(),
    }
    assert kubeconfig["users"] == [{"name": "research", "user": OWN_CREDENTIAL}]
    assert tags["gpu-shards"].endswith("/virtualMachineScaleSets/dev-gpu-s000")
    assert tags["backup"] == "https://devetcd.blob.core.windows.net/etcd-snapshots"


def test_consumer_fields_are_plain_even_when_the_output_arrives_secret(produced):
    seen = {}

    def program():
        cluster = ClusterReference("research", STACK)
        # What a real backend does: the output holding a secret arrives secret as a whole.
        cluster.contract = pulumi.Output.secret(cluster.contract)
        pulumi.Output.all(
            cluster._plain(lambda c: c.network.service_cidr).is_secret(), cluster.kubeconfig(OWN_CREDENTIAL).is_secret()
        ).apply(lambda flags: seen.update(flags=flags))

    run_declarations(program, stack_outputs={STACK: {"cluster": published(produced)}})
    assert seen["flags"] == [False, False]


def consume_expecting_failure(outputs: dict) -> str:
    with pytest.raises(Exception) as error:
        run_declarations(hub_team_program, stack_outputs={STACK: outputs})
    # Pulumi wraps the reader's ContractError in the registration that used the field; the
    # message the user sees is the contract's, naming the stack.
    assert f"stack {STACK}:" in str(error.value)
    return str(error.value)


def test_consumer_fails_clearly_without_the_output():
    assert f"stack {STACK}: no `cluster` output" in consume_expecting_failure({"clusterName": "dev"})


def test_consumer_fails_clearly_on_a_newer_major(produced):
    document = published(produced)
    document["schemaVersion"] = "3.0"
    assert f"stack {STACK}: contract 3.0 is newer than this reader (2.x)" in consume_expecting_failure(
        {"cluster": document}
    )


def test_consumer_of_2_x_refuses_a_1_x_producer_naming_both(produced):
    document = {**published(produced), "schemaVersion": "1.0", "adminKubeconfig": "apiVersion: v1"}
    assert f"stack {STACK}: contract 1.0 is older than this reader (2.x)" in consume_expecting_failure(
        {"cluster": document}
    )


def test_consumer_tolerates_a_newer_minor(produced):
    document = published(produced)
    document["schemaVersion"] = "2.4"
    document["network"]["addedIn24"] = "10.0.0.0/8"
    run = run_declarations(hub_team_program, stack_outputs={STACK: {"cluster": document}})
    assert run.named("hub-routes").inputs["routes"][0]["addressPrefix"] == "172.20.0.0/20"


def test_consumer_fails_clearly_when_the_producer_dropped_a_field(produced):
    document = drop(published(produced), "network.natFrontendIp")
    assert "cluster.network.natFrontendIp: missing" in consume_expecting_failure({"cluster": document})


def test_reader_imports_nothing_of_supercluster_but_the_contract():
    code = (
        "import sys; import components.cluster_reference; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('infra', 'components')))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_DIR, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "['components', 'components.cluster_reference', 'infra', 'infra.contract']"
