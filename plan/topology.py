"""The plan's network as a Mermaid flowchart, so a reviewer sees the topology instead of rebuilding it from tables.

Drawn from the resources the plan declares, with their inputs as ``resources.json`` records them (never
from config), so it shows what ``pulumi up`` would build: the hub and each cluster VNet with its range and
its private IPs against Azure's limits (``infra.network.addressing``'s own count); the system subnets with their
NSG, machines and load balancers; each node pool as one box per VNet, however many scale sets and subnets
it has; the private endpoints; the peerings and the hub's route to the service range.

The plan diff draws the same picture with what the change creates, updates, replaces or deletes marked
(``diff_section``): a class per action, the action's symbol in the label, and a legend. GitHub renders
``mermaid`` code blocks in Markdown files and in pull-request comments.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from infra.facts import tags
from infra.facts.labels import POOL_LABEL
from infra.network.addressing import AddressPlan, VnetPlan
from infra.node.pool import encode_tag_key
from plan.diff import SCALE_SET_TYPE, SYMBOLS, VM_TYPE, Plan, PlanDiff, ResourceChange
from plan.replacements import parse_path

Resource = Mapping[str, Any]  # one resource as resources.json records it
VNET_TYPE = "azure-native:network:VirtualNetwork"
SUBNET_TYPE = "azure-native:network:Subnet"
NIC_TYPE = "azure-native:network:NetworkInterface"
NSG_TYPE = "azure-native:network:NetworkSecurityGroup"
LB_TYPE = "azure-native:network:LoadBalancer"
PEERING_TYPE = "azure-native:network:VirtualNetworkPeering"
ROUTE_TYPE = "azure-native:network:Route"
ENDPOINT_TYPE = "azure-native:network:PrivateEndpoint"

# The most disruptive action names a box that stands for several resources.
SEVERITY = ("delete", "replace", "create", "update")
PAST = {"create": "created", "delete": "deleted", "update": "updated", "replace": "replaced"}
# Readable in GitHub's light and dark themes (dark text on a light fill); deletions also dashed.
_STYLES = {
    "create": "fill:#d3f5d3,stroke:#1a7f37,stroke-width:3px,color:#000",
    "update": "fill:#dbe9ff,stroke:#0969da,stroke-width:3px,color:#000",
    "replace": "fill:#ffe3c2,stroke:#bc4c00,stroke-width:3px,color:#000",
    "delete": "fill:#ffd7d5,stroke:#cf222e,stroke-width:3px,stroke-dasharray:6 4,color:#000",
}
_LISTED = 3  # a box names at most this many of its changed resources
HOW_TO_READ = (
    "Boxes nest VNet > subnet > what runs there; a node pool is one box per VNet, however many scale sets "
    "and subnets it has. VNets peered with every other one sit in the full-mesh box; other peerings are "
    "double-headed links. Arrows run from a load balancer to its machines and from the hub to the NAT "
    "hosts' load balancer (its route to the service range). Cylinders are etcd members."
)


@dataclass
class _Box:
    """A drawn node, subgraph or link, and what it stands for: a change to any of it marks it."""

    id: str
    urns: set[str] = field(default_factory=set)
    subnets: set[tuple[str, int]] = field(default_factory=set)  # (VNet URN, i): a change under its subnets[i]
    vnet: str | None = None  # a VNet's URN: marked by its changes outside subnets[...]


@dataclass
class _Drawing:
    resources: list[Resource]
    addresses: AddressPlan | None
    changes: Mapping[str, ResourceChange]
    lines: list[str] = field(default_factory=list)
    marked: dict[str, str] = field(default_factory=dict)  # node or subgraph id -> action
    links: list[str | None] = field(default_factory=list)  # each link's action, in order: Mermaid styles by index
    drawn: set[str] = field(default_factory=set)  # URNs of the changes some box shows

    def of(self, typ: str) -> list[Resource]:
        return [r for r in self.resources if r["type"] == typ]

    def touching(self, box: _Box) -> list[ResourceChange]:
        found = [self.changes[urn] for urn in sorted(box.urns) if urn in self.changes]
        for vnet, index in sorted(box.subnets):
            change = self.changes.get(vnet)
            if change and (change.action != "update" or any(_under_subnet(p, index) for p in change.changed)):
                found.append(change)
        change = self.changes.get(box.vnet or "")
        if change and (change.action != "update" or not all(_under_subnet(p, None) for p in change.changed)):
            found.append(change)
        found = list({c.urn: c for c in found}.values())
        self.drawn.update(c.urn for c in found)
        return found

    def label(self, box: _Box, *lines: str, own: str | None = None, title: bool = False) -> str:
        """The box's label. When the change touches the box, its id is marked and the label starts with the
        symbol of the most disruptive change, then names the changes, unless the one change is ``own``: the
        resource the box is (a machine, a load balancer, a VNet). A subgraph's ``title`` stays on one line
        (Mermaid does not make room for more above the subgraph's contents)."""
        found = self.touching(box)
        if found:
            action = _worst(found)
            self.marked[box.id] = action
            lines = (f"{SYMBOLS[action]} {lines[0]}", *lines[1:])
            if [c.urn for c in found] != [own]:
                lines += (f"({_changed(found)})" if title else _changed(found),)
        text = (" · " if title else "<br>").join(line for line in lines if line)
        return '"' + text.replace('"', "#quot;") + '"'

    def link(self, box: _Box, text: str) -> None:
        found = self.touching(box)
        self.links.append(_worst(found) if found else None)
        self.lines.append(f"  {text}")


def _changed(changes: list[ResourceChange]) -> str:
    """``a updated, b replaced``; past a few, counts per action (``30 updated``)."""
    if len(changes) <= _LISTED:
        return ", ".join(f"{c.name} {PAST[c.action]}" for c in changes)
    counts = Counter(c.action for c in changes)
    return ", ".join(f"{counts[action]} {PAST[action]}" for action in SEVERITY if counts[action])


def _worst(changes: list[ResourceChange]) -> str:
    return next(action for action in SEVERITY if any(c.action == action for c in changes))


def _under_subnet(path: str, index: int | None) -> bool:
    """True when a VNet input path lies under ``subnets[index]`` (under any subnet when ``index`` is None)."""
    parts = parse_path(path)
    return len(parts) >= 2 and parts[0] == "subnets" and (index is None or parts[1] == str(index))


def _name(arm_id: str | None) -> str:
    """The last segment of an ARM id: the resource's Azure name."""
    return (arm_id or "").rstrip("/").rsplit("/", 1)[-1]


def _subnet_of(reference: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """``(VNet name, subnet name)`` of a ``{"id": <subnet ARM id>}`` reference."""
    match = re.search(r"/virtualNetworks/([^/]+)/subnets/([^/]+)$", (reference or {}).get("id") or "")
    return (match.group(1), match.group(2)) if match else None


def _group_of(arm_id: str) -> str:
    match = re.search(r"/resourceGroups/([^/]+)/", arm_id)
    return match.group(1) if match else ""


def _id(prefix: str, *parts: str) -> str:
    return prefix + re.sub(r"[^A-Za-z0-9_]", "_", "_".join(parts))


def _first(items: list[Any] | None) -> Mapping[str, Any]:
    return (items or [{}])[0]


@dataclass(frozen=True)
class _Subnet:
    vnet_urn: str
    vnet: str
    name: str
    prefix: str
    nsg: str  # the NSG's Azure name, "" without one
    index: int | None  # its place in the VNet's inline subnets; None for a Subnet resource of its own
    urn: str | None = None  # that Subnet resource

    def marks(self, box: _Box, nsgs: Mapping[str, str]) -> _Box:
        """``box``, also marked by changes to this subnet and its NSG."""
        box.urns |= {u for u in (nsgs.get(self.nsg), self.urn) if u}
        if self.index is not None:
            box.subnets.add((self.vnet_urn, self.index))
        return box


def diagram(
    resources: Iterable[Resource], addresses: AddressPlan | None, changes: Mapping[str, ResourceChange] | None = None
) -> str:
    """The Mermaid flowchart (without fences) of the network ``resources`` declare, ``changes`` (by URN) marked."""
    return _draw(_Drawing(list(resources), addresses, changes or {}))


def markdown(source: str) -> str:
    return f"```mermaid\n{source}```"


@dataclass
class _Index:
    """Who uses what, read from the resources' references (ARM ids) to each other."""

    nics: dict[str, Resource]  # by Azure name
    nsgs: dict[str, str]  # Azure name -> URN
    held: dict[tuple[str, str], list[tuple[str, Resource]]]  # (VNet, subnet) -> [(kind, resource)]
    scale_sets: dict[tuple[str, str], list[Resource]]  # (VNet, pool) -> the pool's scale sets there
    pool_of: dict[tuple[str, str], str]  # (VNet, subnet) -> the pool whose scale set uses it
    ids: dict[str, str] = field(default_factory=dict)  # Azure name (subnets: "vnet/subnet") -> drawn id
    lb_ips: dict[str, str] = field(default_factory=dict)  # load balancer frontend IP -> drawn id


def _index(d: _Drawing) -> _Index:
    nics = {r["inputs"].get("networkInterfaceName"): r for r in d.of(NIC_TYPE)}
    held: dict[tuple[str, str], list[tuple[str, Resource]]] = {}
    for lb in d.of(LB_TYPE):
        key = _subnet_of(_first(lb["inputs"].get("frontendIPConfigurations")).get("subnet"))
        if key:
            held.setdefault(key, []).append(("lb", lb))
    for vm in d.of(VM_TYPE):
        nic = nics.get(_name(_first((vm["inputs"].get("networkProfile") or {}).get("networkInterfaces")).get("id")))
        key = _subnet_of(_first(nic["inputs"].get("ipConfigurations")).get("subnet")) if nic else None
        if key:
            held.setdefault(key, []).append(("vm", vm))
    for endpoint in d.of(ENDPOINT_TYPE):
        key = _subnet_of(endpoint["inputs"].get("subnet"))
        if key:
            held.setdefault(key, []).append(("endpoint", endpoint))
    pool_tag = encode_tag_key(POOL_LABEL)
    scale_sets: dict[tuple[str, str], list[Resource]] = {}
    pool_of: dict[tuple[str, str], str] = {}
    for scale_set in d.of(SCALE_SET_TYPE):
        inputs = scale_set["inputs"]
        key = _subnet_of(_primary_ip_configuration(scale_set).get("subnet"))
        if key and tags.MACHINE_ROLE in (inputs.get("tags") or {}):  # the apiservers: machines of a role
            held.setdefault(key, []).append(("scale set", scale_set))
        elif key:
            pool = (inputs.get("tags") or {}).get(pool_tag, scale_set["name"])
            scale_sets.setdefault((key[0], pool), []).append(scale_set)
            pool_of[key] = pool
    nsgs = {r["inputs"].get("networkSecurityGroupName"): r["urn"] for r in d.of(NSG_TYPE)}
    return _Index(nics, nsgs, held, scale_sets, pool_of)


def _primary_ip_configuration(scale_set: Resource) -> Mapping[str, Any]:
    profile = (scale_set["inputs"].get("virtualMachineProfile") or {}).get("networkProfile") or {}
    return _first(_first(profile.get("networkInterfaceConfigurations")).get("ipConfigurations"))


def _draw(d: _Drawing) -> str:
    if d.addresses is not None:  # the peered group's use against its limit, as the diagram's title
        used, limit = d.addresses.private_ips, d.addresses.max_private_ips_per_peered_group
        d.lines += ["---", f'title: "Peered group: {used:,} of {limit:,} private IPs ({used / limit:.0%})"', "---"]
    d.lines.append("flowchart LR")
    index = _index(d)
    vnets = {r["inputs"].get("virtualNetworkName", r["name"]): r for r in d.of(VNET_TYPE)}
    peerings, groups = _peerings(d)
    mesh = _full_mesh(list(vnets), peerings)
    if mesh:
        box = _Box("mesh", {urn for pair, urns in peerings.items() if pair <= mesh for urn in urns})
        d.lines.append(f"  subgraph mesh[{d.label(box, f'{len(mesh)} VNets peered in a full mesh', title=True)}]")
    by_cidr = {str(v.address_space): v for v in d.addresses.peered_vnets} if d.addresses else {}
    for name, vnet in vnets.items():
        _draw_vnet(d, index, name, vnet, by_cidr)
    if mesh:
        d.lines.append("  end")
    _draw_peerings(d, index, peerings, groups, mesh)
    _draw_links(d, index)
    _draw_marks(d)
    return "\n".join(d.lines) + "\n"


def _draw_vnet(d: _Drawing, index: _Index, name: str, vnet: Resource, by_cidr: Mapping[str, VnetPlan]) -> None:
    inputs = vnet["inputs"]
    subnets = [
        _Subnet(
            vnet["urn"], name, s.get("name", ""), s.get("addressPrefix", ""), _nsg(s.get("networkSecurityGroup")), i
        )
        for i, s in enumerate(inputs.get("subnets") or [])
    ] + [  # subnets declared as resources of their own (the hub's)
        _Subnet(
            vnet["urn"],
            name,
            s["inputs"].get("subnetName", s["name"]),
            s["inputs"].get("addressPrefix", ""),
            _nsg(s["inputs"].get("networkSecurityGroup")),
            None,
            s["urn"],
        )
        for s in d.of(SUBNET_TYPE)
        if s["inputs"].get("virtualNetworkName") == name
    ]
    cidrs = (inputs.get("addressSpace") or {}).get("addressPrefixes") or []
    node = index.ids[name] = _id("v_", name)
    use = _use(d.addresses, by_cidr.get(cidrs[0]) if cidrs else None)
    title = d.label(_Box(node, vnet=vnet["urn"]), f"VNet {name}", ", ".join(cidrs), use, own=vnet["urn"], title=True)
    d.lines.append(f"    subgraph {node}[{title}]")
    pools: dict[str, list[_Subnet]] = {}
    for subnet in subnets:
        pool = index.pool_of.get((name, subnet.name))
        if pool is None:
            _draw_subnet(d, index, subnet)
        else:
            pools.setdefault(pool, []).append(subnet)
    for pool, members in pools.items():
        _draw_pool(d, index, pool, members)
    d.lines.append("    end")


def _nsg(reference: Mapping[str, Any] | None) -> str:
    return _name((reference or {}).get("id"))


def _use(addresses: AddressPlan | None, planned: VnetPlan | None) -> str:
    """A VNet's private IPs at full size against Azure's per-VNet limit, as the address plan counts them."""
    if addresses is None or planned is None:
        return ""
    limit = addresses.max_private_ips_per_vnet
    return f"{planned.private_ips:,} of {limit:,} private IPs ({planned.private_ips / limit:.0%})"


def _draw_subnet(d: _Drawing, index: _Index, subnet: _Subnet) -> None:
    box = subnet.marks(_Box(_id("s_", subnet.vnet, subnet.name)), index.nsgs)
    index.ids[f"{subnet.vnet}/{subnet.name}"] = box.id
    nsg = f"NSG {subnet.nsg}" if subnet.nsg else ""
    held = index.held.get((subnet.vnet, subnet.name), [])
    if not held:
        d.lines.append(f"      {box.id}[{d.label(box, f'subnet {subnet.name}', subnet.prefix, nsg)}]")
        return
    d.lines += [
        f"      subgraph {box.id}[{d.label(box, f'subnet {subnet.name}', subnet.prefix, nsg, title=True)}]",
        "        direction TB",
    ]
    endpoints = [r for kind, r in held if kind == "endpoint"]
    for kind, resource in held:
        inputs = resource["inputs"]
        if kind == "lb":
            ip = _first(inputs.get("frontendIPConfigurations")).get("privateIPAddress", "")
            node = index.lb_ips[ip] = index.ids[inputs.get("loadBalancerName", "")] = _id("l_", resource["name"])
            box = _Box(node, {resource["urn"]})
            text = d.label(box, f"load balancer {inputs.get('loadBalancerName')}", ip, own=resource["urn"])
            d.lines.append(f"        {node}[[{text}]]")
        elif kind == "vm":
            nic_name = _name(_first((inputs.get("networkProfile") or {}).get("networkInterfaces")).get("id"))
            nic = index.nics[nic_name]
            node = index.ids[nic_name] = _id("m_", resource["name"])
            role = (inputs.get("tags") or {}).get(tags.MACHINE_ROLE, "VM")
            ip = _first(nic["inputs"].get("ipConfigurations")).get("privateIPAddress", "")
            zones = ", ".join(inputs.get("zones") or [])
            where = " · ".join(x for x in (ip, f"zone {zones}" if zones else "") if x)
            size = (inputs.get("hardwareProfile") or {}).get("vmSize", "")
            box = _Box(node, {resource["urn"], nic["urn"]})
            text = d.label(box, f"{inputs.get('vmName', resource['name'])} ({role})", where, size, own=resource["urn"])
            d.lines.append(f"        {node}[({text})]" if "etcd" in role else f"        {node}[{text}]")
        elif kind == "scale set":
            name = inputs.get("vmScaleSetName", resource["name"])
            node = index.ids[name] = _id("m_", resource["name"])
            role = (inputs.get("tags") or {}).get(tags.MACHINE_ROLE, "")
            sku = inputs.get("sku") or {}
            zones = ", ".join(inputs.get("zones") or [])
            shape = f"{sku.get('capacity', '?')} x {sku.get('name', '')}"
            box = _Box(node, {resource["urn"]})
            text = d.label(
                box, f"{name} ({role} scale set)", f"zones {zones}" if zones else "", shape, own=resource["urn"]
            )
            d.lines.append(f"        {node}[{text}]")
    if endpoints:
        node = _id("e_", subnet.vnet, subnet.name)
        links = [c for e in endpoints for c in e["inputs"].get("privateLinkServiceConnections") or []]
        kinds = sorted({group for c in links for group in c.get("groupIds") or []})
        box = _Box(node, {e["urn"] for e in endpoints})
        d.lines.append(f"        {node}([{d.label(box, f'{len(endpoints)} private endpoints', ', '.join(kinds))}])")
    d.lines.append("      end")


def _draw_pool(d: _Drawing, index: _Index, pool: str, subnets: list[_Subnet]) -> None:
    """A pool's scale sets and subnets in one VNet as one node: never one box per shard."""
    first, last = subnets[0], subnets[-1]
    box = _Box(_id("p_", first.vnet, pool))
    for subnet in subnets:
        subnet.marks(box, index.nsgs)
    scale_sets = index.scale_sets.get((first.vnet, pool), [])
    box.urns |= {s["urn"] for s in scale_sets}
    maxima = [int((s["inputs"].get("tags") or {}).get(tags.AUTOSCALER_MAX, 0)) for s in scale_sets]
    if len(set(maxima)) == 1:
        shape = f"{len(scale_sets)} scale set{'s' if len(scale_sets) > 1 else ''} x {maxima[0]:,} nodes"
    else:
        shape = f"{len(scale_sets)} scale sets, {sum(maxima):,} nodes ({min(maxima):,} to {max(maxima):,} per set)"
    vm_sizes = ", ".join(sorted({(s["inputs"].get("sku") or {}).get("name", "") for s in scale_sets}))
    if len(subnets) == 1:
        where = f"subnet {first.name} · {first.prefix}"
    else:
        prefixes = "/" + ", /".join(sorted({s.prefix.rsplit("/", 1)[-1] for s in subnets if "/" in s.prefix}))
        where = f"{len(subnets)} subnets ({prefixes}) {first.name} … {last.name}<br>{first.prefix} … {last.prefix}"
    nsgs = ", ".join(sorted({s.nsg for s in subnets if s.nsg}))
    text = d.label(box, f"pool {pool}: {shape}", vm_sizes, where, f"NSG {nsgs}" if nsgs else "")
    d.lines.append(f"      {box.id}[{text}]")


def _peerings(d: _Drawing) -> tuple[dict[frozenset[str], set[str]], dict[str, str]]:
    """Peered VNet pairs (by Azure name) with the URNs of their peerings (one resource each way), and each
    peered VNet's resource group."""
    pairs: dict[frozenset[str], set[str]] = {}
    groups: dict[str, str] = {}
    for peering in d.of(PEERING_TYPE):
        inputs = peering["inputs"]
        remote_id = (inputs.get("remoteVirtualNetwork") or {}).get("id") or ""
        local, remote = inputs.get("virtualNetworkName", ""), _name(remote_id)
        groups.setdefault(local, inputs.get("resourceGroupName", ""))
        groups.setdefault(remote, _group_of(remote_id))
        pairs.setdefault(frozenset((local, remote)), set()).add(peering["urn"])
    return pairs, groups


def _full_mesh(vnets: list[str], peerings: Mapping[frozenset[str], set[str]]) -> frozenset[str]:
    """The VNets drawn here when each is peered with every other (three or more); else none."""
    if len(vnets) >= 3 and all(frozenset(pair) in peerings for pair in itertools.combinations(vnets, 2)):
        return frozenset(vnets)
    return frozenset()


def _draw_peerings(
    d: _Drawing,
    index: _Index,
    peerings: Mapping[frozenset[str], set[str]],
    groups: Mapping[str, str],
    mesh: frozenset[str],
) -> None:
    """Peerings outside the full mesh as links. A peered VNet this plan does not build (another stack's hub) is
    a node of its own, linked once to the mesh when it is peered with all of it."""
    external: dict[str, set[str]] = {}  # VNet -> URNs of its peerings into the mesh
    for pair, urns in peerings.items():
        if pair <= mesh:
            continue
        for vnet in sorted(pair - set(index.ids)):
            index.ids[vnet] = index.ids[f"group:{groups[vnet]}"] = _id("h_", vnet)
            text = f"VNet {vnet}<br>another stack's: peered, not built here"
            d.lines.append(f'  {index.ids[vnet]}(["{text}"])')
        inside = pair & mesh
        if mesh and len(inside) == 1:
            (outside,) = pair - mesh
            external.setdefault(outside, set()).update(urns)
            continue
        a, b = sorted(index.ids[vnet] for vnet in pair)
        d.link(_Box(f"{a}-{b}", set(urns)), f"{a} <--> {b}")
    for vnet, urns in external.items():
        peered = {next(iter(pair - {vnet})) for pair in peerings if vnet in pair and pair & mesh}
        if peered == mesh:
            d.link(_Box(f"{vnet}-mesh", urns), f"{index.ids[vnet]} <-->|peered with each| mesh")
        else:
            for other in sorted(peered):
                pair_urns = peerings[frozenset((vnet, other))]
                d.link(_Box(f"{vnet}-{other}", set(pair_urns)), f"{index.ids[vnet]} <--> {index.ids[other]}")


def _draw_links(d: _Drawing, index: _Index) -> None:
    """Load balancers to their machines, and the hub's route to the service range via the NAT hosts' one."""
    for nic_name, nic in index.nics.items():
        for backend in _first(nic["inputs"].get("ipConfigurations")).get("loadBalancerBackendAddressPools") or []:
            match = re.search(r"/loadBalancers/([^/]+)/", backend.get("id") or "")
            if match and match.group(1) in index.ids and nic_name in index.ids:
                d.link(_Box(""), f"{index.ids[match.group(1)]} --> {index.ids[nic_name]}")
    for scale_set in d.of(SCALE_SET_TYPE):
        name = scale_set["inputs"].get("vmScaleSetName", "")
        for backend in _primary_ip_configuration(scale_set).get("loadBalancerBackendAddressPools") or []:
            match = re.search(r"/loadBalancers/([^/]+)/", backend.get("id") or "")
            if match and match.group(1) in index.ids and name in index.ids:
                d.link(_Box(""), f"{index.ids[match.group(1)]} --> {index.ids[name]}")
    tables = {
        _name((s["inputs"].get("routeTable") or {}).get("id")): index.ids.get(
            f"{s['inputs'].get('virtualNetworkName')}/{s['inputs'].get('subnetName')}"
        )
        for s in d.of(SUBNET_TYPE)
    }
    for route in d.of(ROUTE_TYPE):
        inputs = route["inputs"]
        # A table of this stack's hub sits on a subnet drawn here; another stack's hub is known by its group.
        source = tables.get(inputs.get("routeTableName")) or index.ids.get(f"group:{inputs.get('resourceGroupName')}")
        target = index.lb_ips.get(inputs.get("nextHopIpAddress", ""))
        if source and target:
            d.link(_Box("", {route["urn"]}), f"{source} -->|route {inputs.get('addressPrefix')}| {target}")


def _draw_marks(d: _Drawing) -> None:
    used = [action for action in SEVERITY if action in d.marked.values() or action in d.links]
    if not used:
        return
    d.lines.append('  subgraph legend["legend"]')
    d.lines += [f'    legend_{action}["{SYMBOLS[action]} {PAST[action]}"]' for action in used]
    d.lines.append("  end")
    for action in used:
        boxes = [box for box, marked in d.marked.items() if marked == action]
        d.lines += [
            f"  classDef {action} {_STYLES[action]}",
            f"  class {','.join([*boxes, f'legend_{action}'])} {action}",
        ]
    for number, action in enumerate(d.links):
        if action is not None:
            d.lines.append(f"  linkStyle {number} {_STYLES[action].split(',', 1)[1]}")


# ---------------------------------------------------------------------- the summary and the diff


def summary_section(resources: Iterable[Resource], addresses: AddressPlan) -> list[str]:
    """The summary's topology: the diagram, then how to read it."""
    return ["## Topology", "", markdown(diagram(resources, addresses)), "", HOW_TO_READ, ""]


def diff_section(old: Plan, new: Plan, diff: PlanDiff, addresses: AddressPlan | None) -> list[str]:
    """The PR comment's topology: the new plan's network, plus what the change deletes from the old one, with
    every changed resource marked. Empty when no drawn resource changes."""
    deleted = [old.resources[c.urn] for c in diff.of("delete") if c.urn in old.resources]
    drawing = _Drawing([*new.resources.values(), *deleted], addresses, {c.urn: c for c in diff.resources})
    source = _draw(drawing)
    if not drawing.drawn:
        return []
    legend = ", ".join(f"{SYMBOLS[action]} {PAST[action]}" for action in SEVERITY)
    return [
        "### Topology",
        "",
        markdown(source),
        "",
        f"Marked ({legend}): {len(drawing.drawn)} of the {len(diff.resources)} changed resources are part of "
        f"the network drawn here; the table below lists every one. {HOW_TO_READ}",
        "",
    ]
