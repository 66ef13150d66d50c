"""How another team's Pulumi program reads a supercluster stack: a typed ``StackReference``.

    from components.cluster_reference import ClusterReference

    cluster = ClusterReference("research-cluster", "organization/supercluster/prod")
    azure.network.Route(..., address_prefix=cluster.service_cidr,
                        next_hop_ip_address=cluster.nat_frontend_ip)
    k8s = kubernetes.Provider("research", kubeconfig=cluster.admin_kubeconfig)

The ``cluster`` output is checked against the contract (infra/contract.py) before any
field is handed out: a missing output, another major version or a missing field fails
the consumer's program with one message naming the stack and the field. Only the
secret fields stay secret; the ids and ranges arrive as plain values even though the
output they travel in holds a secret.

Imports nothing from supercluster but ``infra/contract.py`` (standard library only), so a
consuming team can vendor these two files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import pulumi

from infra.contract import OUTPUT_NAME, ClusterContract, EtcdBackup, NodePool, parse_contract

T = TypeVar("T")


class ClusterReference:
    reference: pulumi.StackReference
    contract: pulumi.Output[ClusterContract]
    cluster_name: pulumi.Output[str]
    location: pulumi.Output[str]
    resource_group_name: pulumi.Output[str]
    kubernetes_version: pulumi.Output[str]
    vnet_ids: pulumi.Output[Mapping[str, str]]
    subnet_ids: pulumi.Output[Mapping[str, str]]
    pod_cidrs: pulumi.Output[Mapping[str, str]]
    service_cidr: pulumi.Output[str]
    dns_service_ip: pulumi.Output[str]
    nat_frontend_ip: pulumi.Output[str]
    apiserver_endpoint: pulumi.Output[str]
    ca_certificate: pulumi.Output[str]
    admin_kubeconfig: pulumi.Output[str]  # secret
    node_pools: pulumi.Output[Mapping[str, NodePool]]
    etcd_backup: pulumi.Output[EtcdBackup]

    def __init__(self, name: str, stack: str, opts: pulumi.ResourceOptions | None = None) -> None:
        """``stack`` is fully qualified: ``organization/supercluster/<stack>`` on an Azure Blob backend."""
        self.reference = pulumi.StackReference(name, stack_name=stack, opts=opts)
        source = f"stack {stack}"
        self.contract = self.reference.get_output(OUTPUT_NAME).apply(lambda document: parse_contract(document, source))
        self.cluster_name = self._plain(lambda c: c.cluster_name)
        self.location = self._plain(lambda c: c.location)
        self.resource_group_name = self._plain(lambda c: c.resource_group_name)
        self.kubernetes_version = self._plain(lambda c: c.kubernetes_version)
        self.vnet_ids = self._plain(lambda c: c.network.vnet_ids)
        self.subnet_ids = self._plain(lambda c: c.network.subnet_ids)
        self.pod_cidrs = self._plain(lambda c: c.network.pod_cidrs)
        self.service_cidr = self._plain(lambda c: c.network.service_cidr)
        self.dns_service_ip = self._plain(lambda c: c.network.dns_service_ip)
        self.nat_frontend_ip = self._plain(lambda c: c.network.nat_frontend_ip)
        self.apiserver_endpoint = self._plain(lambda c: c.apiserver.endpoint)
        self.ca_certificate = self._plain(lambda c: c.apiserver.ca_certificate)
        self.admin_kubeconfig = pulumi.Output.secret(self.contract.apply(lambda c: c.admin_kubeconfig))
        self.node_pools = self._plain(lambda c: c.node_pools)
        self.etcd_backup = self._plain(lambda c: c.etcd_backup)

    def _plain(self, pick: Callable[[ClusterContract], T]) -> pulumi.Output[T]:
        # The whole `cluster` output arrives secret because the kubeconfig inside it is;
        # the contract says which fields are not.
        return pulumi.Output.unsecret(self.contract.apply(pick))

    def shard_ids(self, pool: str) -> pulumi.Output[list[str]]:
        """Scale set ids of one pool, in shard order (e.g. for autoscaler or monitoring config)."""
        return self.node_pools.apply(lambda pools: [shard.scale_set_id for shard in _pool(pools, pool).shards])


def _pool(pools: Mapping[str, Any], name: str) -> NodePool:
    if name not in pools:
        raise KeyError(f"no node pool {name!r} in the cluster; it has {', '.join(sorted(pools))}")
    return pools[name]
