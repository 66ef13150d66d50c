"""Who the members of an etcd cluster are, and how the kube-apiserver reaches both clusters.

There are two clusters (the 2,500-node post): ``etcd`` holds everything, ``events-etcd``
holds only Kubernetes Events, so an Event storm never slows the main store. Each member
is a dedicated VM with a static address from the address plan (its cluster's subnet),
placed round-robin over availability zones 1-3. Member ``i`` keeps its name, address and
zone forever, so growing a cluster only adds members.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from infra.boot.secret_names import (
    APISERVER_ETCD_CAS,
    APISERVER_ETCD_CLIENT_CERT,
    APISERVER_ETCD_CLIENT_FILES,
    APISERVER_ETCD_CLIENT_KEY,
)
from infra.catalog.vm_sizes import VM_SIZES, VmSize
from infra.config import naming
from infra.config.cluster_config import ClusterConfig, EtcdConfig
from infra.facts import ports, roles
from infra.network.addressing import AddressPlan

# etcd's ports (infra/facts/ports.py), under the names the etcd renderers and tests use.
CLIENT_PORT = ports.ETCD_CLIENT
PEER_PORT = ports.ETCD_PEER
METRICS_PORT = ports.ETCD_METRICS

# The two clusters, by role: the role names the subnet, the identity and the backup container.
MAIN = roles.ETCD.machine
EVENTS = roles.EVENTS_ETCD.machine
ROLES = (MAIN, EVENTS)

# Availability zones the members are spread over (round-robin by member index).
ZONES = ("1", "2", "3")

# etcd owns compaction (``auto-compaction-*`` in config_file.py), so the apiserver must not also
# compact: 0 disables its compactor ("If 0, the compaction request from apiserver is disabled",
# kube-apiserver --etcd-compaction-interval).
APISERVER_COMPACTION_INTERVAL = "0"


@dataclass(frozen=True)
class EtcdMember:
    index: int
    name: str  # VM name, hostname and etcd member name, e.g. prod-etcd-0
    ip: str
    zone: str

    @property
    def client_url(self) -> str:
        return f"https://{self.ip}:{CLIENT_PORT}"

    @property
    def peer_url(self) -> str:
        return f"https://{self.ip}:{PEER_PORT}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.ip}:{METRICS_PORT}"


@dataclass(frozen=True)
class EtcdClusterSpec:
    cluster_name: str
    role: str  # MAIN or EVENTS
    config: EtcdConfig
    members: tuple[EtcdMember, ...]

    @property
    def vm_size(self) -> VmSize:
        return VM_SIZES[self.config.vm_size]

    @property
    def client_urls(self) -> list[str]:
        return [member.client_url for member in self.members]

    @property
    def initial_cluster(self) -> str:
        return ",".join(f"{member.name}={member.peer_url}" for member in self.members)

    @property
    def token(self) -> str:
        """Initial cluster token: distinct per cluster, so the two clusters can never merge."""
        return f"{self.cluster_name}-{self.role}"

    @property
    def backup_container(self) -> str:
        return self.role


class Planned(Protocol):
    """What the members are derived from: config and the address plan (a ``ClusterSpec`` is one).
    Not ``ClusterSpec`` itself, so ``infra.etcd`` stays below ``infra.cluster.cluster_spec`` and the add-ons
    (monitoring scrapes the backup metrics, ``infra.etcd.backup_metrics``) may read it."""

    @property
    def config(self) -> ClusterConfig: ...

    @property
    def addresses(self) -> AddressPlan: ...


def etcd_cluster_spec(spec: Planned, role: str) -> EtcdClusterSpec:
    """The members of the ``etcd`` or ``events-etcd`` cluster, from config and the address plan."""
    if role not in ROLES:
        raise ValueError(f"unknown etcd role {role!r}")
    config = spec.config.etcd if role == MAIN else spec.config.events_etcd
    cluster_role = f"{spec.config.cluster_name}-{role}"
    ips = spec.addresses.etcd_ips(role, config.members)
    members = tuple(
        EtcdMember(index=i, name=naming.etcd_member(cluster_role, i), ip=ip, zone=ZONES[i % len(ZONES)])
        for i, ip in enumerate(ips)
    )
    return EtcdClusterSpec(spec.config.cluster_name, role, config, members)


def etcd_servers(main: EtcdClusterSpec) -> str:
    """``--etcd-servers``: every member of the main cluster."""
    return ",".join(main.client_urls)


def events_override(events: EtcdClusterSpec) -> str:
    """``--etcd-servers-overrides``: Events to their own cluster, in the post's format
    (``/events#https://a:2379;https://b:2379``: group/resource, then URLs separated by ``;``)."""
    return "/events#" + ";".join(events.client_urls)


def apiserver_etcd_flags(main: EtcdClusterSpec, events: EtcdClusterSpec) -> dict[str, str]:
    """Every kube-apiserver flag about etcd, for the control plane to merge into its flags."""
    files = {secret.secret_name: secret.path for secret in APISERVER_ETCD_CLIENT_FILES}
    return {
        "etcd-servers": etcd_servers(main),
        "etcd-servers-overrides": events_override(events),
        "etcd-cafile": files[APISERVER_ETCD_CAS],
        "etcd-certfile": files[APISERVER_ETCD_CLIENT_CERT],
        "etcd-keyfile": files[APISERVER_ETCD_CLIENT_KEY],
        "etcd-compaction-interval": APISERVER_COMPACTION_INTERVAL,
    }
