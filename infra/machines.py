"""The cloud-init of every dedicated machine, rendered before any resource is declared.

The node pools' and the NAT hosts' cloud-init are rendered in ``infra.cluster``; the etcd members'
and the apiservers' here, from the finished ``ClusterSpec`` (their renderers read it, so this step
sits above ``infra.cluster`` rather than inside it). The components only encode and declare what
they are handed: no machine's files are decided inside a Pulumi component.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from infra import naming
from infra.cluster import ClusterSpec
from infra.control_plane.machine import ApiserverMachine, apiserver_machines
from infra.etcd.machine import member_cloud_init
from infra.etcd.spec import EVENTS, MAIN, EtcdClusterSpec, apiserver_etcd_flags, etcd_cluster_spec


@dataclass(frozen=True)
class EtcdMachines:
    cluster: EtcdClusterSpec
    cloud_inits: tuple[str, ...]  # each member's, in member order


@dataclass(frozen=True)
class MachinePlan:
    etcd: Mapping[str, EtcdMachines]  # MAIN and EVENTS
    apiservers: tuple[ApiserverMachine, ...]


def render_machines(spec: ClusterSpec) -> MachinePlan:
    vault_name = naming.key_vault(spec.config.cluster_name)
    etcd = {role: etcd_cluster_spec(spec, role) for role in (MAIN, EVENTS)}
    return MachinePlan(
        etcd={
            role: EtcdMachines(
                cluster, tuple(member_cloud_init(cluster, member, vault_name) for member in cluster.members)
            )
            for role, cluster in etcd.items()
        },
        apiservers=apiserver_machines(spec, apiserver_etcd_flags(etcd[MAIN], etcd[EVENTS])),
    )
