"""The plan summary reviewers read first: what is declared, how big the cluster can grow, the IP budget."""

from __future__ import annotations

from collections import Counter

from infra.config.cluster_config import ClusterConfig
from infra.config.sizing import shards
from infra.facts.labels import ROLE_GPU
from infra.network.addressing import AddressPlan
from infra.network.egress import machines_in_vnet, nat_gateways
from infra.node import join_time
from plan import topology
from plan.critical_path import critical_path, custom_dependencies, machines_waiting_for_machines
from plan.mocks import Registration


def render_summary(
    stack: str,
    config: ClusterConfig,
    addresses: AddressPlan,
    registrations: list[Registration],
    example_stacks: tuple[str, ...] = (),
) -> str:
    lines = [f"# supercluster plan: stack `{stack}`", ""]
    custom = [r for r in registrations if r.custom]
    lines += [f"{len(custom)} resources ({len(registrations) - len(custom)} components).", ""]
    lines += topology.summary_section((r.as_json() for r in custom), addresses)

    lines += ["## Resources by type", "", "| type | count |", "|---|---:|"]
    for typ, count in sorted(Counter(r.type for r in custom).items()):
        lines.append(f"| `{typ}` | {count} |")

    lines += [
        "",
        "## Node pools",
        "",
        "| pool | role | VM size | scale sets | per set (Azure max) | min | max |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for pool in config.node_pools:
        pool_shards = shards(pool)
        state = " (retired)" if pool.retired else ""
        lines.append(
            f"| {pool.name}{state} | {pool.role} | {pool.vm_size} | {len(pool_shards)} | "
            f"{pool_shards[0].capacity} | {pool.min_nodes} | {pool.max_nodes} |"
        )
    lines += [
        "",
        f"**Node capacity: {config.max_nodes_total:,} nodes** "
        f"({sum(len(shards(p)) for p in config.node_pools)} scale sets).",
        "",
    ]

    lines += [
        "## IP budget",
        "",
        f"Limits: {addresses.max_private_ips_per_vnet:,} private IPs per VNet, "
        f"{addresses.max_private_ips_per_peered_group:,} per peered group.",
        "",
        "| VNet | address space | subnets | private IPs at max size | of VNet limit | egress IPs | SNAT ports per VM |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    egress = {gateway.vnet: gateway for gateway in nat_gateways(addresses)}
    for vnet in addresses.peered_vnets:
        share = vnet.private_ips / addresses.max_private_ips_per_vnet
        gateway = egress.get(vnet.key)
        if gateway is not None:
            machines = max(1, machines_in_vnet(config, addresses, vnet.key))
            nat = f"{gateway.public_ips} | {gateway.snat_ports // machines:,}"
        else:
            nat = "- | -"
        lines.append(
            f"| {vnet.key} | {vnet.address_space} | {len(vnet.subnets)} | {vnet.private_ips:,} | {share:.0%} | {nat} |"
        )
    total_share = addresses.private_ips / addresses.max_private_ips_per_peered_group
    lines += [f"| **peered group** | | | **{addresses.private_ips:,}** | **{total_share:.0%}** | | |", ""]

    hub = config.network.hub
    lines += ["## Hub and NAT hosts", ""]
    if hub.stack is not None:
        source = (
            "example outputs (no --stack-outputs given), not the real hub's"
            if hub.stack in example_stacks
            else "the outputs given with --stack-outputs"
        )
        lines.append(f"Peered to the hub of stack `{hub.stack}`; this plan read {source}.")
    else:
        lines.append(f"Hub created by this stack: {hub.address_space}, counted in the peered group.")
    lines += [
        "",
        f"The hub routes {addresses.service_cidr} to {config.network.nat_hosts.count} NAT host(s) "
        f"({config.network.nat_hosts.vm_size}) behind {addresses.nat_lb_ip()}.",
        "",
    ]

    lines += _critical_path_section(registrations)
    lines += join_time.summary_lines(gpu_pools=any(p.role == ROLE_GPU for p in config.node_pools))
    return "\n".join(lines) + "\n"


def _critical_path_section(registrations: list[Registration]) -> list[str]:
    graph = custom_dependencies(registrations)  # made once for both
    path = critical_path(registrations, graph)
    lines = [
        "## Deploy critical path",
        "",
        f"Longest chain of dependent resources: {len(path.chain)} resources, an estimated "
        f"**{path.seconds // 60} min {path.seconds % 60:02d} s** on a fresh deploy "
        "(typical create times per type: plan/critical_path.py).",
        "",
    ]
    lines += [f"{i}. `{r.type}` {r.name}" for i, r in enumerate(path.chain, 1)]
    waiting = machines_waiting_for_machines(registrations, graph)
    lines += [
        "",
        "Machines waiting for other machines: "
        + (
            "none (every VM and scale set is created in parallel)."
            if not waiting
            else ", ".join(f"{a} waits for {b}" for a, b in waiting)
        ),
        "",
    ]
    return lines
