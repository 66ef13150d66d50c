"""Critical path and the no-machine-waits-for-a-machine rule, on synthetic and real plans."""

from __future__ import annotations

from plan.critical_path import critical_path, custom_dependencies, machines_waiting_for_machines
from plan.mocks import Registration

VM = "azure-native:compute:VirtualMachine"
VMSS = "azure-native:compute:VirtualMachineScaleSet"
RG = "azure-native:resources:ResourceGroup"


def reg(name: str, typ: str, deps=(), parent: str = "root", custom: bool = True) -> Registration:
    return Registration(
        urn=name,
        id=f"{name}-id",
        type=typ,
        name=name,
        parent=parent,
        custom=custom,
        inputs={},
        options={},
        dependencies=list(deps),
    )


def test_depending_on_a_component_means_waiting_for_its_children():
    regs = [
        reg("rg", RG),
        reg("pool", "supercluster:x:Pool", custom=False),
        reg("vmss", VMSS, ["rg"], parent="pool"),
        reg("vm", VM, ["pool"]),
    ]
    assert custom_dependencies(regs)["vm"] == {"vmss"}
    assert machines_waiting_for_machines(regs) == [("vm", "vmss")]


def test_longest_chain_is_weighted_by_create_time():
    regs = [
        reg("rg", RG),
        reg("a", VM, ["rg"]),
        reg("b", "tls:index/privateKey:PrivateKey"),
        reg("c", "tls:index/selfSignedCert:SelfSignedCert", ["b"]),
    ]
    path = critical_path(regs)
    assert [r.name for r in path.chain] == ["rg", "a"]
    assert path.seconds == 5 + 120


def test_no_machine_waits_for_another_machine_in_prod(prod_plan):
    machines = [r for r in prod_plan.registrations if r.type in (VM, VMSS)]
    assert len(machines) > 60, "prod declares its VMs and scale sets"
    assert machines_waiting_for_machines(prod_plan.registrations) == []
    path = critical_path(prod_plan.registrations)
    assert path.chain and path.seconds > 0
    assert sum(r.type in (VM, VMSS) for r in path.chain) <= 1, "at most one machine on the longest chain"


def test_component_dependencies_hold_back_its_children():
    regs = [
        reg("rg", RG),
        reg("gate", "azure-native:compute:VirtualMachineExtension", ["rg"]),
        reg("vm-component", "supercluster:machines:DedicatedVm", ["gate"], custom=False),
        reg("vm", VM, ["rg"], parent="vm-component"),
    ]
    assert custom_dependencies(regs)["vm"] == {"rg", "gate"}
