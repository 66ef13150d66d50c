"""How another team's Pulumi program reads a supercluster stack: a typed ``StackReference``.

    from components.cluster_reference import ClusterReference

    cluster = ClusterReference("research-cluster", "organization/supercluster/prod")
    azure.network.Route(..., address_prefix=cluster.service_cidr,
                        next_hop_ip_address=cluster.nat_frontend_ip)
    k8s = kubernetes.Provider("research", kubeconfig=cluster.kubeconfig(
        {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "...", "args": [...]}}))

The ``cluster`` output is checked against the contract (infra/contract.py) before any
field is handed out: a missing output, another major version or a missing field fails
the consumer's program with one message naming the stack and the field. It holds no
credential (contract 2.0): a consumer reaches the apiserver as its own identity, with the
credential entry it brings (``kubeconfig``), and gets what RBAC grants that identity.

Imports nothing from supercluster but ``infra/contract.py`` (standard library only), so a
consuming team can vendor these two files.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import pulumi

from infra.contract import OUTPUT_NAME, ClusterContract, EtcdBackup, NodePool, parse_contract

T = TypeVar("T")


class ClusterReference:
    name: str
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
    node_pools: pulumi.Output[Mapping[str, NodePool]]
    etcd_backup: pulumi.Output[EtcdBackup]

    def __init__(self, name: str, stack: str, opts: pulumi.ResourceOptions | None = None) -> None:
        """``stack`` is fully qualified: ``organization/supercluster/<stack>`` on an Azure Blob backend."""
        self.name = name
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
        self.node_pools = self._plain(lambda c: c.node_pools)
        self.etcd_backup = self._plain(lambda c: c.etcd_backup)

    def _plain(self, pick: Callable[[ClusterContract], T]) -> pulumi.Output[T]:
        # A 1.x `cluster` output arrived secret (it held a kubeconfig); the contract says which fields are not.
        return pulumi.Output.unsecret(self.contract.apply(pick))

    def kubeconfig(self, user: Mapping[str, Any], name: str = "consumer") -> pulumi.Output[str]:
        """A kubeconfig (JSON, which kubeconfig readers accept) for the cluster's endpoint and CA with ``user``,
        the consumer's own ``users[].user`` entry: an exec credential plugin, or certificate files. The
        cluster hands out no credential; this carries only what the consumer brings."""
        entry = dict(user)
        return pulumi.Output.all(self.apiserver_endpoint, self.ca_certificate).apply(
            lambda values: json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": self.name,
                            "cluster": {
                                "server": values[0],
                                "certificate-authority-data": base64.b64encode(values[1].encode()).decode(),
                            },
                        }
                    ],
                    "users": [{"name": name, "user": entry}],
                    "contexts": [{"name": name, "context": {"cluster": self.name, "user": name}}],
                    "current-context": name,
                },
                sort_keys=True,
            )
        )

    def shard_ids(self, pool: str) -> pulumi.Output[list[str]]:
        """Scale set ids of one pool, in shard order (e.g. for autoscaler or monitoring config)."""
        return self.node_pools.apply(lambda pools: [shard.scale_set_id for shard in _pool(pools, pool).shards])


def _pool(pools: Mapping[str, Any], name: str) -> NodePool:
    if name not in pools:
        raise KeyError(f"no node pool {name!r} in the cluster; it has {', '.join(sorted(pools))}")
    return pools[name]
