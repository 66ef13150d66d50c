"""Every Azure role assignment of both real plans, walked: no identity's scope holds a resource it does not manage.

A role assignment on a scope reaches every resource under it (Azure RBAC inherits down the
id path), so what a grant reaches is every planned resource whose id is the scope or lies
under it. Finding 1 of docs/security.md: the autoscaler's Virtual Machine Contributor (which
allows Run Command) reached the etcd members and apiservers through the cluster's resource
group. Now it reaches the node scale sets (in their own group) and the node subnets (join), and
every other identity reaches exactly the one resource it was granted.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from infra.config import naming
from infra.config.sizing import shards
from infra.facts.labels import POOL_LABEL, ROLE_SYSTEM
from plan.runner import ProgramRun
from tests.helpers import parsed

IDENTITY = "azure-native:managedidentity:UserAssignedIdentity"
ROLE_ASSIGNMENT = "azure-native:authorization:RoleAssignment"
VMSS = "azure-native:compute:VirtualMachineScaleSet"
VNET = "azure-native:network:VirtualNetwork"
GROUP = "azure-native:resources:ResourceGroup"
SUBNET = "subnet (inline in its VNet)"
# What any identity but the autoscaler may be granted: one secret, its backup container, the registry.
SINGLE_RESOURCE_SCOPES = (
    "azure-native:keyvault:Secret",
    "azure-native:storage:BlobContainer",
    "azure-native:containerregistry:Registry",
    # Image Builder writes image versions into the gallery (components/machine_images.py).
    "azure-native:compute:Gallery",
)


@pytest.fixture(params=["dev", "prod"])
def stack_plan(request, dev_plan, prod_plan) -> ProgramRun:
    return {"dev": dev_plan, "prod": prod_plan}[request.param]


@dataclass(frozen=True)
class Reached:
    type: str
    name: str
    id: str


def _under(resource_id: str, scope: str) -> bool:
    resource_id, scope = resource_id.lower(), scope.lower().rstrip("/")  # ARM ids are case-insensitive
    return resource_id == scope or resource_id.startswith(scope + "/")


def _resources(run: ProgramRun) -> list[Reached]:
    """Every planned Azure resource with the id Azure gives it: a VNet's inline subnets included, and a
    VNet's children (peerings) under the VNet's id, where Azure nests them (the mock ids are flat)."""
    found = []
    for r in run.registrations:
        if not (r.type.startswith("azure-native:") and r.id):
            continue
        resource_id = r.id
        if r.type != VNET and "virtualNetworkName" in r.inputs:
            group = r.id.split("/providers/")[0]
            resource_id = (
                f"{group}/providers/Microsoft.Network/virtualNetworks/{r.inputs['virtualNetworkName']}/"
                f"{r.type.split(':')[-1]}/{r.name}"
            )
        found.append(Reached(r.type, r.name, resource_id))
        if r.type == VNET:
            found += [
                Reached(SUBNET, subnet["name"], f"{r.id}/subnets/{subnet['name']}")
                for subnet in r.inputs.get("subnets") or []
            ]
    return found


def reach(run: ProgramRun, scope: str) -> list[Reached]:
    """Every planned Azure resource a grant on ``scope`` applies to."""
    return [r for r in _resources(run) if _under(r.id, scope)]


def _roles(run: ProgramRun) -> dict[str, str]:
    return {i.urn: i.name.removeprefix(f"{run.stack}-id-") for i in run.of_type(IDENTITY)}


def _managed_by_autoscaler(run: ProgramRun) -> set[str]:
    """The node scale sets, their group, and the subnets their NICs join."""
    config = parsed(run.stack)
    node_subnets = {shard.name for pool in config.node_pools for shard in shards(pool)}
    ids = {r.id for r in run.node_scale_sets()}
    ids |= {r.id for r in _resources(run) if r.type == SUBNET and r.name in node_subnets}
    ids |= {
        r.id
        for r in run.of_type(GROUP)
        if r.inputs["resourceGroupName"] == naming.node_resource_group(config.cluster_name)
    }
    return ids


def _read_by_join_approver(run: ProgramRun) -> set[str]:
    """The VMs a node may be, which the apiservers' approver reads from Azure: the node group (every scale-set
    instance and its NICs), the NAT hosts and their NICs."""
    ids = {r.id for r in run.node_scale_sets()}
    config = parsed(run.stack)
    group = naming.node_resource_group(config.cluster_name)
    ids |= {r.id for r in run.of_type(GROUP) if r.inputs["resourceGroupName"] == group}
    return ids | set(_nat_hosts_and_nics(run).values())


def _nat_hosts_and_nics(run: ProgramRun) -> dict[str, str]:
    """``{name: id}`` of every NAT host and its NIC (the one its network profile names)."""
    config = parsed(run.stack)
    names = {naming.nat_host(config.cluster_name, i) for i in range(config.network.nat_hosts.count)}
    vms = [r for r in run.of_type(VM) if r.inputs["vmName"] in names]
    found = {r.inputs["vmName"]: r.id for r in vms}
    nics = {r.id for r in run.of_type(NIC)}
    for vm in vms:
        for interface in vm.inputs["networkProfile"]["networkInterfaces"]:
            assert interface["id"] in nics, f"{vm.name}'s NIC is not planned"
            found[interface["id"].rsplit("/", 1)[1]] = interface["id"]
    return found


def test_no_identity_reaches_a_resource_it_does_not_manage(stack_plan):
    roles = _roles(stack_plan)
    autoscaler_may = _managed_by_autoscaler(stack_plan)
    approver_reads = _read_by_join_approver(stack_plan)
    grants = stack_plan.of_type(ROLE_ASSIGNMENT)
    assert grants
    for grant in grants:
        [principal] = grant.property_dependencies["principalId"]
        role = roles[principal]
        reached = reach(stack_plan, grant.inputs["scope"])
        assert reached, f"{grant.name}: its scope is no planned resource"
        if role == "autoscaler":
            beyond = sorted(f"{r.type.split(':')[-1]} {r.name}" for r in reached if r.id not in autoscaler_may)
            assert not beyond, f"{grant.name} reaches {beyond}"
        elif role == "apiserver" and _role_definition(grant) == READER_ROLE:
            beyond = sorted(f"{r.type.split(':')[-1]} {r.name}" for r in reached if r.id not in approver_reads)
            assert not beyond, f"{grant.name} reaches {beyond}"
        else:
            assert [r.type for r in reached] in ([t] for t in SINGLE_RESOURCE_SCOPES), (
                f"{grant.name} ({role}) reaches {[(r.type, r.name) for r in reached]}"
            )


def test_the_node_group_holds_the_node_scale_sets_and_nothing_else(stack_plan):
    cluster = parsed(stack_plan.stack).cluster_name
    [group] = [
        g for g in stack_plan.of_type(GROUP) if g.inputs["resourceGroupName"] == naming.node_resource_group(cluster)
    ]
    inside = [r for r in reach(stack_plan, group.id) if r.id != group.id]
    scale_sets = stack_plan.node_scale_sets()
    assert scale_sets and sorted(r.id for r in inside) == sorted(r.id for r in scale_sets)
    # Nothing that carries the control plane or the NAT path is in it.
    assert not [r for r in inside if r.type != VMSS]


def test_the_autoscaler_lists_the_group_it_may_change(stack_plan):
    """The Azure provider lists scale sets in ARM_RESOURCE_GROUP: it must be the node group, or it
    finds nothing to scale (and a grant there would be useless)."""
    cluster = parsed(stack_plan.stack).cluster_name
    deployments = [
        r
        for r in stack_plan.registrations
        if r.type == "kubernetes:apps/v1:Deployment" and r.inputs["metadata"]["name"] == "cluster-autoscaler"
    ]
    [deployment] = deployments
    [container] = deployment.inputs["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["ARM_RESOURCE_GROUP"] == naming.node_resource_group(cluster)


VM = "azure-native:compute:VirtualMachine"
NIC = "azure-native:network:NetworkInterface"
# Built-in "Reader" (learn.microsoft.com/azure/role-based-access-control/built-in-roles/general#reader): reads only.
READER_ROLE = "acdd72a7-3385-48ef-bd42-f606fba81ae7"


def _role_definition(grant) -> str:
    return str(grant.inputs["roleDefinitionId"]).rsplit("/", 1)[-1]


def _machine_identities(run: ProgramRun) -> dict[str, list[str]]:
    """Every VM and scale set, by name, with the identity ids it carries."""
    return {
        r.name: sorted((r.inputs.get("identity") or {}).get("userAssignedIdentities") or {})
        for r in [*run.of_type(VMSS), *run.of_type(VM)]
    }


def _system_scale_sets(run: ProgramRun) -> set[str]:
    """The scale sets of the tainted system pools: the only machines tenants cannot land on that carry
    an identity with rights on machines."""
    config = parsed(run.stack)
    system_pools = {pool.name for pool in config.node_pools if pool.role == ROLE_SYSTEM}
    return {r.name for r in run.node_scale_sets() if r.inputs["tags"][POOL_LABEL.replace("/", "_")] in system_pools}


def test_no_identity_on_a_machine_that_runs_tenant_pods_can_change_a_machine(stack_plan):
    """Walks every role assignment and every machine's identities: an identity whose grants reach a VM or
    a scale set (any role but Reader) is carried only by the system pools' scale sets, which are tainted
    and which no tenant namespace may tolerate (infra/control_plane/admission.py)."""
    identity_by_id = {i.id: i.urn for i in stack_plan.of_type(IDENTITY)}
    machine_types = {VM, VMSS}
    changes_machines = set()
    for grant in stack_plan.of_type(ROLE_ASSIGNMENT):
        if _role_definition(grant) == READER_ROLE:
            continue
        if any(r.type in machine_types for r in reach(stack_plan, grant.inputs["scope"])):
            [principal] = grant.property_dependencies["principalId"]
            changes_machines.add(principal)
    assert changes_machines, "the autoscaler must be able to scale something"
    system = _system_scale_sets(stack_plan)
    assert system, "a plan with the autoscaler needs a system pool"
    for machine, identity_ids in _machine_identities(stack_plan).items():
        carried = {identity_by_id[i] for i in identity_ids if i in identity_by_id}
        assert len(carried) == len(identity_ids), f"{machine} carries an identity that is not planned"
        if machine not in system:
            assert not carried & changes_machines, (
                f"{machine} runs tenant pods and carries {carried & changes_machines}"
            )


def test_the_autoscaler_may_change_exactly_the_scale_sets_it_manages(stack_plan):
    """Virtual Machine Contributor (the narrowest built-in role that can scale a scale set) on each scale
    set, one by one; Reader on the node group so it can list them; the join on each node subnet."""
    roles = _roles(stack_plan)
    scale_sets = {r.id for r in stack_plan.node_scale_sets()}
    changed: set[str] = set()
    for grant in stack_plan.of_type(ROLE_ASSIGNMENT):
        [principal] = grant.property_dependencies["principalId"]
        if roles[principal] != "autoscaler":
            continue
        reached = reach(stack_plan, grant.inputs["scope"])
        if _role_definition(grant) == READER_ROLE:
            assert [r.type for r in reached][0] == GROUP
            continue
        assert len(reached) == 1 and reached[0].type in (VMSS, SUBNET), (grant.name, reached)
        changed |= {r.id for r in reached if r.type == VMSS}
    assert changed == scale_sets


def test_the_apiservers_read_exactly_the_vms_a_node_may_be_and_their_nics(stack_plan):
    """The node certificates' approver resolves a joining node's VM, and a Node's VM and its NICs (the addresses
    a serving certificate may name), through Azure as the apiserver identity: Reader on the node group (scale-set
    instances and their NICs are under it), on each NAT host and on each NAT host's NIC, which is a resource of
    its own beside the VM (without that grant Azure answers 403 and a NAT host's serving request waits forever);
    no other grant of that identity reaches a machine or a NIC."""
    roles = _roles(stack_plan)
    config = parsed(stack_plan.stack)
    nat_hosts = set(_nat_hosts_and_nics(stack_plan).values())
    [node_group] = [
        g.id
        for g in stack_plan.of_type(GROUP)
        if g.inputs["resourceGroupName"] == naming.node_resource_group(config.cluster_name)
    ]
    scopes = {}
    for grant in stack_plan.of_type(ROLE_ASSIGNMENT):
        [principal] = grant.property_dependencies["principalId"]
        reached = reach(stack_plan, grant.inputs["scope"])
        if roles[principal] == "apiserver" and any(r.type in (VM, VMSS, NIC) for r in reached):
            scopes[grant.inputs["scope"]] = _role_definition(grant)
    assert set(scopes) == {node_group, *nat_hosts} and set(scopes.values()) == {READER_ROLE}
