"""Reads the control plane's rendered files the way a machine receives them: from cloud-init."""

from __future__ import annotations

import functools
from types import ModuleType

from infra.cluster.cluster_spec import ClusterSpec, build_cluster_spec
from infra.control_plane.apiserver_machine import ApiserverMachine, apiserver_machines
from infra.etcd.spec import EVENTS, MAIN, apiserver_etcd_flags, etcd_cluster_spec
from plan.artifacts import file_content
from tests.helpers import load_program, load_yaml, raw_config


def spec(stack: str = "prod", **top_level_changes) -> ClusterSpec:
    raw = raw_config(stack)
    raw.update(top_level_changes)
    return build_cluster_spec(raw, "eastus")


def etcd_flags(cluster: ClusterSpec) -> dict[str, str]:
    """What the assembly hands the apiservers (``infra.assembly.desired_cluster``): the flags of the cluster's two
    etcd clusters."""
    return apiserver_etcd_flags(etcd_cluster_spec(cluster, MAIN), etcd_cluster_spec(cluster, EVENTS))


@functools.cache
def machines(stack: str = "prod") -> tuple[ApiserverMachine, ...]:
    cluster = spec(stack)
    return apiserver_machines(cluster, etcd_flags(cluster))


def files(machine: ApiserverMachine) -> dict[str, str]:
    """``{path on the machine: content}`` from the machine's rendered cloud-init."""
    document = load_yaml(machine.cloud_init)
    return {entry["path"]: file_content(entry) for entry in document["write_files"]}


def unit_flags(unit: str) -> dict[str, str]:
    """``--key=value`` flags of a unit's ExecStart, as strings (``--key`` alone maps to ``""``)."""
    words = []
    for line in unit.split("ExecStart=", 1)[1].splitlines():
        words += line.rstrip("\\").split()
        if not line.endswith("\\"):
            break
    flags = {}
    for word in words[1:]:  # words[0] is the binary
        assert word.startswith("--"), word
        key, _, value = word[2:].partition("=")
        assert key not in flags, f"--{key} given twice"
        flags[key] = value
    return flags


def component_flags(machine: ApiserverMachine, unit: str) -> dict[str, str]:
    return unit_flags(files(machine)[f"/etc/systemd/system/{unit}"])


@functools.cache
def approver_program() -> ModuleType:
    """The node certificates' approver as every apiserver runs it (``machine/control_plane/csr_approver.py``),
    imported from its file."""
    return load_program("control_plane/csr_approver.py")
