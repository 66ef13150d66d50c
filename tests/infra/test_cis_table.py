"""The CIS table of docs/cis-benchmark.md is checked against the files the apiserver VMs actually receive."""

from __future__ import annotations

import pytest

from infra.control_plane import controller_manager, machine_identity, paths, scheduler
from infra.network.security_groups import HUB, SecurityRule, monitoring_pools, security_groups
from tests.helpers import doc_table_rows, load_yaml
from tests.infra.control_plane_files import component_flags, files, machines, spec
from tests.network_model import allows

# CIS Kubernetes Benchmark v1.12, sections 1.2-1.4 (kube-bench cfg/cis-1.12/master.yaml).
CHECKS = [f"1.2.{n}" for n in range(1, 31)] + [f"1.3.{n}" for n in range(1, 8)] + ["1.4.1", "1.4.2"]
UNITS = {"1.2": paths.APISERVER_UNIT, "1.3": paths.CONTROLLER_MANAGER_UNIT, "1.4": paths.SCHEDULER_UNIT}
SECURE_PORTS = {"1.3": controller_manager.SECURE_PORT, "1.4": scheduler.SECURE_PORT}
VM_ADDRESS = "<VM address>"
HUB_PREFIX = "192.0.2.0/24"  # stands for the hub's prefixes (TEST-NET-1)


ROWS = doc_table_rows("docs/cis-benchmark.md", "## CIS Kubernetes Benchmark (control plane)", "1.")


def test_table_covers_every_control_plane_check():
    assert list(ROWS) == CHECKS


def _as_azure(rule: SecurityRule) -> dict:
    """The rule as the plan records it (components/network.py), the hub's prefixes stood in for."""
    sources = [HUB_PREFIX if s == HUB else s for s in rule.sources]
    return {
        "name": rule.name,
        "priority": rule.priority,
        "direction": rule.direction,
        "access": rule.access,
        "protocol": rule.protocol,
        "sourceAddressPrefixes": sources,
        "destinationAddressPrefixes": list(rule.destinations),
        "destinationPortRanges": list(rule.ports),
    }


def secure_port_only_from_monitoring(section: str) -> None:
    """Who reaches the component's secure port on an apiserver VM through prod's apiserver NSG: a
    pod or node of a monitoring pool (Prometheus's nodeSelector), and nobody else (other pools, the
    other apiservers, etcd, the NAT hosts, the hub)."""
    cluster = spec("prod")
    plan, port = cluster.addresses, SECURE_PORTS[section]
    monitoring = monitoring_pools(cluster.config)
    (group,) = [g for g in security_groups(plan, monitoring_pools=monitoring) if g.key == "apiserver"]
    rules = [_as_azure(r) for r in group.rules]
    target = plan.apiserver_ips(cluster.config.control_plane.apiservers)[0]
    virtual_network = [*(str(v.address_space) for v in plan.vnets), HUB_PREFIX]

    def reaches(source: str) -> bool:
        return allows(
            rules, source=source, destination=target, port=port, protocol="Tcp", virtual_network=virtual_network
        )

    assert monitoring
    for vnet in plan.vnets:
        for subnet in vnet.subnets if vnet.pool is not None else ():
            assert reaches(subnet.host(7)) is (vnet.pool in monitoring), (vnet.pool, subnet.key)
    others = {
        "another apiserver": plan.apiserver_ips(2)[1],
        "etcd": plan.etcd_ips("etcd", 1)[0],
        "nat host": plan.nat_host_ips(1)[0],
        "hub": HUB_PREFIX.replace("0/24", "9"),
    }
    assert not [name for name, ip in others.items() if reaches(ip)]


CHECKS_BY_NAME = {"secure-port-only-from-monitoring": secure_port_only_from_monitoring}


@pytest.mark.parametrize("check", CHECKS)
def test_row_matches_rendered_files(check):
    section = check.rsplit(".", 1)[0]
    claims = ROWS[check]
    assert claims, f"{check}: no rendered setting in the table"
    for claim in claims:
        if claim.startswith("check: "):
            CHECKS_BY_NAME[claim.removeprefix("check: ")](section)
        elif claim.endswith(f"={VM_ADDRESS}"):
            key = claim[2:].partition("=")[0]
            for machine in machines("prod"):
                flags = component_flags(machine, UNITS[section])
                # The machine's own address, read from IMDS at boot (infra/control_plane/machine_identity.py).
                assert flags.get(key) == machine_identity.ADDRESS, f"{check}: --{key} on {machine.vm_name}"
        else:
            _check_flag_claim(check, section, claim)


def _check_flag_claim(check: str, section: str, claim: str) -> None:
    machine = machines("prod")[0]
    flags = component_flags(machine, UNITS[section])
    if claim.startswith("no --"):
        assert claim[5:] not in flags, f"{check}: --{claim[5:]} is set"
    elif claim.startswith("--"):
        key, sep, value = claim[2:].partition("=")
        assert key in flags, f"{check}: --{key} is not set"
        if sep:
            assert flags[key] == value, f"{check}: --{key}={flags[key]}, docs/cis-benchmark.md says {value}"
    else:
        key, value = (part.strip() for part in claim.split(":", 1))
        config = load_yaml(files(machine)[flags["config"]])
        assert config[key] == load_yaml(value), f"{check}: {key} is {config[key]}"
