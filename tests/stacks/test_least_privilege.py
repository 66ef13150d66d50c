"""Least privilege over both real plans: no public IP on a machine, encryption at host, SSH by key only,
and each role identity reads exactly the Key Vault secrets its machines fetch, one secret per grant.

(Who may reach which port, SSH only from the hub included, is tests/stacks/test_network_plan.py.)
"""

from __future__ import annotations

import re

import pytest

from components.identities import READER_ROLE, VIRTUAL_MACHINE_CONTRIBUTOR_ROLE
from components.secret_store import KEY_VAULT_SECRETS_USER_ROLE
from infra.boot.secrets import FETCH_SCRIPT_PATH
from infra.catalog.vm_sizes import VM_SIZES
from plan.artifacts import collect_files
from plan.runner import ProgramRun

VM = "azure-native:compute:VirtualMachine"
VMSS = "azure-native:compute:VirtualMachineScaleSet"
NIC = "azure-native:network:NetworkInterface"
LB = "azure-native:network:LoadBalancer"
IDENTITY = "azure-native:managedidentity:UserAssignedIdentity"
ROLE_ASSIGNMENT = "azure-native:authorization:RoleAssignment"
SECRET = "azure-native:keyvault:Secret"


@pytest.fixture(params=["dev", "prod"])
def stack_plan(request, dev_plan, prod_plan) -> ProgramRun:
    return {"dev": dev_plan, "prod": prod_plan}[request.param]


def _keys(value, prefix=""):
    """Every key path in a nested input, e.g. ``networkProfile.networkInterfaceConfigurations[0].name``."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield f"{prefix}.{key}" if prefix else key
            yield from _keys(item, f"{prefix}.{key}" if prefix else key)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _keys(item, f"{prefix}[{i}]")


def test_no_machine_nic_or_load_balancer_has_a_public_ip(stack_plan):
    assert not stack_plan.of_type("azure-native:network:PublicIPAddress")
    for typ in (VM, VMSS, NIC, LB):
        for resource in stack_plan.of_type(typ):
            public = [path for path in _keys(resource.inputs) if re.search(r"publicip", path, re.IGNORECASE)]
            assert not public, f"{resource.name}: {public}"
    # The only public addresses are the NAT gateways' egress prefixes, attached to nothing else.
    gateways = stack_plan.of_type("azure-native:network:NatGateway")
    prefixes = {r.id for r in stack_plan.of_type("azure-native:network:PublicIPPrefix")}
    assert prefixes == {p["id"] for g in gateways for p in g.inputs["publicIpPrefixes"]}


def _size(resource) -> str:
    return resource.inputs["hardwareProfile"]["vmSize"] if resource.type == VM else resource.inputs["sku"]["name"]


def _profile(resource) -> dict:
    return resource.inputs if resource.type == VM else resource.inputs["virtualMachineProfile"]


def test_every_machine_encrypts_at_host_and_every_size_used_supports_it(stack_plan):
    machines = stack_plan.of_type(VM) + stack_plan.of_type(VMSS)
    assert machines
    for machine in machines:
        assert VM_SIZES[_size(machine)].encryption_at_host, f"{machine.name}: {_size(machine)}"
        assert _profile(machine)["securityProfile"]["encryptionAtHost"] is True, machine.name


def test_ssh_by_key_only(stack_plan):
    for machine in stack_plan.of_type(VM) + stack_plan.of_type(VMSS):
        linux = _profile(machine)["osProfile"]["linuxConfiguration"]
        assert linux["disablePasswordAuthentication"] is True, machine.name
        assert "adminPassword" not in _profile(machine)["osProfile"], machine.name


def _role_of_identity(run: ProgramRun) -> dict[str, str]:
    """Identity id and URN -> role (``etcd``, ``node``, ...)."""
    roles = {}
    for identity in run.of_type(IDENTITY):
        role = identity.name.rsplit("-id-", 1)[1]
        roles[identity.id] = roles[identity.urn] = role
    return roles


def _fetched(run: ProgramRun) -> dict[str, set[str]]:
    """Role -> the Key Vault secret names its machines fetch at boot (from their rendered fetch script)."""
    files = collect_files(run.registrations)
    roles = _role_of_identity(run)
    fetched: dict[str, set[str]] = {}
    for machine in run.of_type(VM) + run.of_type(VMSS):
        identities = [roles[i] for i in machine.inputs["identity"]["userAssignedIdentities"]]
        assert machine.inputs["identity"]["type"] == "UserAssigned", machine.name
        # The machine's boot scripts sign in as the role its identity file names ...
        named = files[f"{machine.name}/etc/supercluster/identity"].strip()
        role = named.rsplit("/", 1)[-1].removeprefix(f"{run.stack}-id-")
        # ... which is its only identity, but for system-pool nodes, which also carry the cluster autoscaler's.
        assert identities == [role] or (identities == ["node", "autoscaler"] and "pool-platform" in machine.name), (
            machine.name,
            identities,
        )
        script = files[f"{machine.name}/{FETCH_SCRIPT_PATH.lstrip('/')}"]
        names = set(re.findall(r"^fetch (\S+) ", script, flags=re.MULTILINE))
        fetched.setdefault(role, set()).update(names)
    return fetched


def test_each_role_reads_exactly_the_secrets_its_machines_fetch_one_secret_per_grant(stack_plan):
    by_id = {r.id: r for r in stack_plan.registrations}
    roles = _role_of_identity(stack_plan)
    readable: dict[str, set[str]] = {}
    for grant in stack_plan.of_type(ROLE_ASSIGNMENT):
        scope = by_id.get(grant.inputs["scope"])
        [principal] = grant.property_dependencies["principalId"]
        assert grant.inputs["principalType"] == "ServicePrincipal" and principal in roles, grant.name
        if roles[principal] == "autoscaler":
            # Reader on the node resource group (to list the scale sets), Virtual Machine Contributor on each
            # scale set and on each node subnet (join): what it reaches is tests/stacks/test_identity_scopes.py.
            if scope is not None and scope.type == "azure-native:resources:ResourceGroup":
                assert grant.inputs["roleDefinitionId"].endswith(f"/{READER_ROLE}"), grant.name
            else:
                assert (
                    scope is not None
                    and scope.type == "azure-native:compute:VirtualMachineScaleSet"
                    or "/subnets/" in grant.inputs["scope"]
                ), grant.name
                assert grant.inputs["roleDefinitionId"].endswith(f"/{VIRTUAL_MACHINE_CONTRIBUTOR_ROLE}")
            continue
        if roles[principal] == "apiserver" and grant.inputs["roleDefinitionId"].endswith(f"/{READER_ROLE}"):
            # Reader on the node group, each NAT host and its NIC: the node certificates' approver reads the VM a
            # node names and a Node's VM's NICs (tests/stacks/test_identity_scopes.py); nothing else of the
            # apiserver's is a machine.
            assert scope is not None and scope.type in (
                "azure-native:resources:ResourceGroup",
                "azure-native:compute:VirtualMachine",
                "azure-native:network:NetworkInterface",
            ), grant.name
            continue
        # No other grant on the vault, the group or the subscription: each names one resource.
        assert scope.type in (
            SECRET,
            "azure-native:storage:BlobContainer",
            "azure-native:containerregistry:Registry",
            "azure-native:compute:Gallery",
        ), f"{grant.name} on {scope.type}"
        if scope.type == "azure-native:compute:Gallery":  # Image Builder writes the machine image versions
            assert roles[principal] == "image-builder", grant.name
        if grant.inputs["roleDefinitionId"].endswith(f"/{KEY_VAULT_SECRETS_USER_ROLE}"):
            assert scope.type == SECRET, grant.name
            readable.setdefault(roles[principal], set()).add(scope.inputs["secretName"])
    assert readable == _fetched(stack_plan)
    assert readable["node"] == readable["nat"] == {"cluster-ca-crt", "node-bootstrap-token"}
    assert not readable["etcd"] & readable["events-etcd"] - {"etcd-ca-crt"}, "each etcd cluster reads its own keys"
