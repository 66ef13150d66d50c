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


def _expanded_naively(registrations: list[Registration]) -> dict[str, set[str]]:
    """``custom_dependencies`` as first written: every dependency expanded afresh, for every resource."""
    by_urn = {r.urn: r for r in registrations}
    children: dict[str, list[str]] = {}
    for r in registrations:
        children.setdefault(r.parent, []).append(r.urn)

    def expand(urn: str) -> set[str]:
        resource = by_urn.get(urn)
        if resource is None:
            return set()
        if resource.custom:
            return {urn}
        return set().union(*(expand(child) for child in children.get(urn, [])))

    graph = {}
    for r in registrations:
        if r.custom:
            inherited, parent = [], by_urn.get(r.parent)
            while parent is not None:
                inherited += parent.dependencies
                parent = by_urn.get(parent.parent)
            graph[r.urn] = set().union(*(expand(d) for d in [*r.dependencies, *inherited])) - {r.urn}
    return graph


def test_the_dependency_graph_expands_each_component_once_to_what_expanding_every_time_gives(prod_plan):
    """The graph behind the summary's critical path expands each component into its custom descendants once, and
    the summary makes it once for both of its uses."""
    graph = custom_dependencies(prod_plan.registrations)
    assert graph == _expanded_naively(prod_plan.registrations)
    assert critical_path(prod_plan.registrations, graph) == critical_path(prod_plan.registrations)
    assert machines_waiting_for_machines(prod_plan.registrations, graph) == machines_waiting_for_machines(
        prod_plan.registrations
    )
