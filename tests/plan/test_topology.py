"""The topology diagram in the plan summary and the plan diff, read from what the real dev and prod plans declare.

Structure here; that Mermaid's own parser accepts every diagram is tests/plan/test_topology_parses.py (slow)."""

from __future__ import annotations

import copy
import re

import pytest

from infra.config.cluster_config import LOCATION_KEY, ClusterConfig, parse_config
from infra.config.sizing import shards
from infra.day2.deploy_rules import APISERVER_ROLE, ETCD_ROLES, MACHINE_ROLE_TAG, NAT_HOST_ROLE
from infra.network.addressing import plan_addresses
from plan import topology
from plan.diff import VM_TYPE, Plan, diff_plans
from plan.diff_report import render_diff
from plan.runner import ProgramRun
from plan.stackfile import namespace_values
from plan.summary import render_summary
from tests.conftest import as_plan


def config_of(run: ProgramRun) -> ClusterConfig:
    """The config a stack's run planned, parsed as ``python -m plan`` parses it for the summary."""
    return parse_config(namespace_values(run.config), run.config.get(LOCATION_KEY))


@pytest.fixture(scope="module")
def prod_addresses(prod_plan):
    return plan_addresses(config_of(prod_plan))


@pytest.fixture(scope="module")
def prod(prod_plan) -> Plan:
    return as_plan(prod_plan)


def nodes(source: str) -> dict[str, str]:
    """``{id: label}`` of every node and subgraph."""
    found = dict(re.findall(r'^\s*(?:subgraph )?(\w+)[\[(]+"([^"]*)"', source, re.M))
    assert found, source
    return found


def classes(source: str) -> dict[str, str]:
    """``{id: class}`` from the diagram's ``class a,b action`` lines."""
    return {i: action for ids, action in re.findall(r"^\s*class (\S+) (\w+)$", source, re.M) for i in ids.split(",")}


def machines(plan: Plan, role: str) -> list[dict]:
    return [
        r for r in plan.resources.values() if r["type"] == VM_TYPE and r["inputs"]["tags"][MACHINE_ROLE_TAG] == role
    ]


def test_each_vnet_shows_its_range_and_the_address_plans_use_against_azures_limit(prod, prod_addresses):
    source = topology.diagram(prod.resources.values(), prod_addresses)
    labels = list(nodes(source).values())
    limit = prod_addresses.max_private_ips_per_vnet
    for vnet in prod_addresses.vnets:
        [label] = [x for x in labels if x.startswith("VNet ") and f"· {vnet.address_space} ·" in x]
        assert f"{vnet.private_ips:,} of {limit:,} private IPs ({vnet.private_ips / limit:.0%})" in label
    group = prod_addresses.private_ips, prod_addresses.max_private_ips_per_peered_group
    assert f'title: "Peered group: {group[0]:,} of {group[1]:,} private IPs' in source


def test_a_pool_is_one_box_per_vnet_however_many_scale_sets(prod_plan, prod, prod_addresses):
    source = topology.diagram(prod.resources.values(), prod_addresses)
    pools = {i: label for i, label in nodes(source).items() if i.startswith("p_")}
    config = config_of(prod_plan)
    assert len(pools) == len(prod_addresses.vnets) - 1  # one VNet per pool here, plus the system VNet
    for pool in config.node_pools:
        [label] = [x for x in pools.values() if x.startswith(f"pool {pool.name}:")]
        pool_shards = shards(pool)
        if len({s.max_nodes for s in pool_shards}) == 1:
            sets = f"{len(pool_shards)} scale set{'s' if len(pool_shards) > 1 else ''}"
            assert f"{sets} x {pool_shards[0].max_nodes:,} nodes" in label
        assert pool.vm_size in label
        if len(pool_shards) > 1:
            assert (
                f"{len(pool_shards)} subnets (/" in label and f"{pool_shards[0].name} … {pool_shards[-1].name}" in label
            )
        else:
            assert f"subnet {pool_shards[0].name} · " in label
    scale_sets = sum(len(shards(p)) for p in config.node_pools)
    assert scale_sets > 60 and len(nodes(source)) < 40  # readable: never a box per shard


def test_the_machines_load_balancers_and_hub_are_drawn_where_the_plan_puts_them(prod, prod_addresses):
    source = topology.diagram(prod.resources.values(), prod_addresses)
    labels = nodes(source)
    for role in (NAT_HOST_ROLE, *ETCD_ROLES):
        for vm in machines(prod, role):
            [node] = [i for i, label in labels.items() if label.startswith(f"{vm['inputs']['vmName']} ({role})")]
            assert (f'{node}[("' in source) == ("etcd" in role)  # etcd members are cylinders
    addresses = prod_addresses
    apiserver_lb = next(
        i for i, x in labels.items() if x.startswith("load balancer") and addresses.apiserver_lb_ip() in x
    )
    nat_lb = next(i for i, x in labels.items() if x.startswith("load balancer") and addresses.nat_lb_ip() in x)
    # The apiservers: one scale set in their subnet, behind their load balancer.
    [apiservers] = [i for i, label in labels.items() if label.startswith("prod-apiservers (apiserver scale set)")]
    assert "5 x Standard_E64ds_v5" in labels[apiservers] and "zones 1, 2, 3" in labels[apiservers]
    assert machines(prod, APISERVER_ROLE) == []
    assert source.count(f"{apiserver_lb} --> m_") == 1 and f"{apiserver_lb} --> {apiservers}" in source
    assert source.count(f"{nat_lb} --> m_") == len(machines(prod, NAT_HOST_ROLE))
    assert f"-->|route {addresses.service_cidr}| {nat_lb}" in source  # the hub's route to the service range
    assert f"{len(addresses.vnets)} VNets peered in a full mesh" in source
    assert "<-->|peered with each| mesh" in source  # prod peers with another stack's hub


def test_the_summary_shows_the_diagram_first(dev_plan):
    config = config_of(dev_plan)
    text = render_summary("dev", config, plan_addresses(config), dev_plan.registrations)
    assert text.index("## Topology") < text.index("```mermaid") < text.index("## Resources by type")


def changed(plan: Plan, name: str, edit) -> Plan:
    """``plan`` with the resource named ``name`` edited: the plan before a change that undoes the edit."""
    resources = copy.deepcopy(plan.resources)
    [resource] = [r for r in resources.values() if r["name"] == name]
    edit(resource["inputs"])
    return Plan(resources, plan.outputs, plan.files)


def test_a_diff_that_changes_the_apiserver_model_marks_the_scale_set(prod, prod_addresses):
    [scale_set] = [r["name"] for r in prod.resources.values() if r["name"].endswith("-control-plane-apiservers")]
    old = changed(prod, scale_set, lambda inputs: inputs["sku"].update(name="Standard_E32ds_v5"))
    diff = diff_plans(old, prod)
    assert [(c.name, c.action) for c in diff.resources] == [(scale_set, "update")]
    section = topology.diff_section(old, prod, diff, prod_addresses)
    source = "\n".join(section)
    node = next(i for i, label in nodes(source).items() if label.startswith("~ prod-apiservers"))
    assert classes(source) == {node: "update", "legend_update": "update"}
    report = render_diff("prod", "old", diff, topology=section)
    assert report.index("### Topology") < report.index("### Resources")


def test_a_change_to_the_etcd_nsg_marks_the_etcd_subnet(prod, prod_addresses):
    nsg = next(
        r["name"]
        for r in prod.resources.values()
        if r["inputs"].get("networkSecurityGroupName", "").endswith("-etcd-nsg")
    )
    old = changed(prod, nsg, lambda inputs: inputs["securityRules"].pop())
    diff = diff_plans(old, prod)
    source = "\n".join(topology.diff_section(old, prod, diff, prod_addresses))
    [(node, action)] = [(i, a) for i, a in classes(source).items() if not i.startswith("legend")]
    assert action == "update" and nodes(source)[node].startswith("~ subnet etcd ·")
    assert f"({nsg} updated)" in nodes(source)[node]


def test_a_deleted_machine_is_drawn_from_the_old_plan(prod, prod_addresses):
    nat_host = machines(prod, NAT_HOST_ROLE)[-1]
    nic_name = nat_host["inputs"]["networkProfile"]["networkInterfaces"][0]["id"].rsplit("/", 1)[1]
    nic = next(r for r in prod.resources.values() if r["inputs"].get("networkInterfaceName") == nic_name)
    new = Plan({u: r for u, r in prod.resources.items() if u not in (nat_host["urn"], nic["urn"])}, prod.outputs, {})
    diff = diff_plans(prod, new)
    source = "\n".join(topology.diff_section(prod, new, diff, prod_addresses))
    [node] = [i for i, label in nodes(source).items() if label.startswith(f"- {nat_host['inputs']['vmName']}")]
    assert classes(source)[node] == "delete" and "2 of the 2 changed resources" in source


def test_a_change_outside_the_network_draws_nothing(prod, prod_addresses):
    role = next(r for r in prod.resources.values() if r["type"] == "azure-native:authorization:RoleAssignment")
    old = changed(prod, role["name"], lambda inputs: inputs.update(description="before"))
    diff = diff_plans(old, prod)
    assert diff.resources and topology.diff_section(old, prod, diff, prod_addresses) == []
