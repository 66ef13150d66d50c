"""The deploy's critical path: the longest chain of resources that must be created one after another.

Pulumi creates a resource as soon as everything it depends on exists, so a fresh
deploy takes about as long as its slowest dependency chain. Each resource's
dependencies are what the engine receives (``dependsOn`` plus the resources its
inputs come from); depending on a component means waiting for all its children.

The design goal this makes checkable: no VM or scale set waits for another VM or
scale set (static IPs come from the address plan, certificates from pulumi-tls), so
every machine is created in parallel.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from infra.node.join_time import VM_CREATE_SECONDS
from plan.mocks import Registration

# Typical time to create one resource of a type on a fresh deploy, in seconds. These are
# planning estimates from Azure deployment durations seen in practice (ARM operation
# times), not guarantees; they only rank chains and give an order of magnitude.
TYPICAL_CREATE_SECONDS = {
    "azure-native:resources:ResourceGroup": 5,
    "azure-native:network:VirtualNetwork": 10,
    "azure-native:network:Subnet": 10,
    "azure-native:network:VirtualNetworkPeering": 15,
    "azure-native:network:NetworkSecurityGroup": 10,
    "azure-native:network:RouteTable": 10,
    "azure-native:network:Route": 10,
    "azure-native:network:NatGateway": 20,
    "azure-native:network:PublicIPAddress": 10,
    "azure-native:network:PublicIPPrefix": 10,
    "azure-native:network:LoadBalancer": 30,
    "azure-native:network:NetworkInterface": 10,
    "azure-native:network:PrivateEndpoint": 60,
    "azure-native:network:PrivateDnsZoneGroup": 20,
    "azure-native:privatedns:PrivateZone": 30,
    "azure-native:privatedns:VirtualNetworkLink": 30,
    "azure-native:keyvault:Vault": 30,
    "azure-native:keyvault:Secret": 5,
    "azure-native:authorization:RoleAssignment": 10,
    "azure-native:managedidentity:UserAssignedIdentity": 5,
    "azure-native:storage:StorageAccount": 30,
    "azure-native:storage:BlobServiceProperties": 5,
    "azure-native:storage:BlobContainer": 5,
    "azure-native:containerregistry:Registry": 60,
    "azure-native:containerregistry:CacheRule": 10,
    "azure-native:compute:Gallery": 30,
    "azure-native:compute:GalleryImage": 30,
    # Creating the template only: the image build it starts runs for tens of minutes, outside the deploy.
    "azure-native:virtualmachineimages:VirtualMachineImageTemplate": 60,
    "azure-native:compute:VirtualMachine": VM_CREATE_SECONDS,
    "azure-native:compute:VirtualMachineScaleSet": 180,
    # The apiserver readiness gate: cloud-init, binary install and the apiserver's own start-up.
    "azure-native:compute:VirtualMachineExtension": 240,
}
DEFAULT_CREATE_SECONDS = 5  # tls, random and Kubernetes objects: seconds once their dependencies exist
MACHINE_TYPES = ("azure-native:compute:VirtualMachine", "azure-native:compute:VirtualMachineScaleSet")


@dataclass(frozen=True)
class CriticalPath:
    chain: tuple[Registration, ...]  # first created first
    seconds: int


def custom_dependencies(registrations: list[Registration]) -> dict[str, set[str]]:
    """Each custom resource's dependencies, with components replaced by their custom descendants.

    A resource also waits for whatever its ancestor components depend on: the SDK registers a
    child only once its parent is registered, and a parent only once its ``dependsOn`` exist."""
    by_urn = {r.urn: r for r in registrations}
    children: dict[str, list[str]] = {}
    for r in registrations:
        children.setdefault(r.parent, []).append(r.urn)

    custom_below: dict[str, set[str]] = {}  # each resource's expansion, made once: shared, never changed

    def expand(urn: str) -> set[str]:
        found = custom_below.get(urn)
        if found is None:
            resource = by_urn.get(urn)
            found = set() if resource is None else {urn} if resource.custom else set()
            if resource is not None and not resource.custom:
                for child in children.get(urn, []):  # parents form a tree: no resource is reached twice
                    found |= expand(child)
            custom_below[urn] = found
        return found

    def ancestors(resource: Registration):
        parent = by_urn.get(resource.parent)
        while parent is not None:
            yield parent
            parent = by_urn.get(parent.parent)

    graph: dict[str, set[str]] = {}
    for r in registrations:
        if r.custom:
            deps: set[str] = set()
            for dep in [*r.dependencies, *(d for a in ancestors(r) for d in a.dependencies)]:
                deps |= expand(dep)
            deps.discard(r.urn)
            graph[r.urn] = deps
    return graph


def critical_path(registrations: list[Registration], graph: dict[str, set[str]] | None = None) -> CriticalPath:
    """The longest chain of ``graph`` (``custom_dependencies(registrations)``, made here when not given)."""
    by_urn = {r.urn: r for r in registrations}
    graph = custom_dependencies(registrations) if graph is None else graph

    @cache
    def finish(urn: str) -> tuple[int, tuple[str, ...]]:
        own = TYPICAL_CREATE_SECONDS.get(by_urn[urn].type, DEFAULT_CREATE_SECONDS)
        best: tuple[int, tuple[str, ...]] = (0, ())
        for dep in graph[urn]:
            candidate = finish(dep)
            if candidate[0] > best[0]:
                best = candidate
        return best[0] + own, best[1] + (urn,)

    if not graph:
        return CriticalPath((), 0)
    seconds, chain = max((finish(urn) for urn in graph), key=lambda item: item[0])
    return CriticalPath(tuple(by_urn[u] for u in chain), seconds)


def machines_waiting_for_machines(
    registrations: list[Registration], graph: dict[str, set[str]] | None = None
) -> list[tuple[str, str]]:
    """``(machine, machine it transitively waits for)`` pairs; empty when all machines start together. ``graph``
    as ``critical_path`` takes it."""
    by_urn = {r.urn: r for r in registrations}
    graph = custom_dependencies(registrations) if graph is None else graph
    closure: dict[str, set[str]] = {}

    def reach(urn: str) -> set[str]:
        if urn not in closure:
            closure[urn] = set()
            for dep in graph.get(urn, ()):
                closure[urn] |= {dep} | reach(dep)
        return closure[urn]

    pairs = []
    for r in registrations:
        if r.custom and r.type in MACHINE_TYPES:
            for dep in sorted(reach(r.urn)):
                if by_urn[dep].type in MACHINE_TYPES:
                    pairs.append((r.name, by_urn[dep].name))
    return pairs
