"""The stack's ``cluster`` output, filled from the spec and from what the components created.

Everything the config and the address plan decide (ranges, the two load balancer
addresses, pools and their shard names) is computed here; what only Azure or the
PKI knows (resource ids, the CA, the kubeconfig, the backup container) is passed in
by ``components/cluster_outputs.py``, as plain values or Pulumi Outputs alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infra.cluster.cluster_spec import ClusterSpec
from infra.config.sizing import shards
from infra.contract import ClusterContract, NodePool, Shard, build_contract
from infra.facts.endpoints import apiserver_url


def apiserver_endpoint(spec: ClusterSpec) -> str:
    return apiserver_url(spec.addresses.apiserver_lb_ip())


def shard_names(spec: ClusterSpec) -> list[str]:
    """Every scale set the config plans, retired pools included (their scale sets still exist)."""
    return [shard.name for pool in spec.config.node_pools for shard in shards(pool)]


def cluster_contract(
    spec: ClusterSpec,
    *,
    resource_group_name: Any,
    vnet_ids: Mapping[str, Any],
    subnet_ids: Mapping[str, Any],
    scale_set_ids: Mapping[str, Any],
    ca_certificate: Any,
    etcd_backup_storage_account_id: Any,
    etcd_backup_container_url: Any,
) -> ClusterContract:
    """``scale_set_ids`` maps every planned shard name (``shard_names``) to its scale set's id."""
    expected = shard_names(spec)
    if sorted(scale_set_ids) != sorted(expected):
        missing = sorted(set(expected) - set(scale_set_ids))
        extra = sorted(set(scale_set_ids) - set(expected))
        raise ValueError(f"scale_set_ids must name every planned shard: missing {missing}, unexpected {extra}")
    config, addresses = spec.config, spec.addresses
    node_pools = {
        pool.name: NodePool(
            role=pool.role,
            vm_size=pool.vm_size,
            min_nodes=0 if pool.retired else pool.min_nodes,
            max_nodes=0 if pool.retired else pool.max_nodes,
            retired=pool.retired,
            shards=tuple(
                Shard(name=shard.name, scale_set_id=scale_set_ids[shard.name], subnet_id=subnet_ids[shard.name])
                for shard in shards(pool)
            ),
        )
        for pool in config.node_pools
    }
    return build_contract(
        cluster_name=config.cluster_name,
        location=config.location,
        resource_group_name=resource_group_name,
        kubernetes_version=config.kubernetes_version,
        vnet_ids=dict(vnet_ids),
        subnet_ids=dict(subnet_ids),
        pod_cidrs={pool.name: str(addresses.vnet(pool.name).address_space) for pool in config.node_pools},
        service_cidr=str(addresses.service_cidr),
        dns_service_ip=addresses.dns_service_ip,
        nat_frontend_ip=addresses.nat_lb_ip(),
        apiserver_endpoint=apiserver_endpoint(spec),
        ca_certificate=ca_certificate,
        node_pools=node_pools,
        etcd_backup_storage_account_id=etcd_backup_storage_account_id,
        etcd_backup_container_url=etcd_backup_container_url,
    )
