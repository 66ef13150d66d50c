"""Both etcd clusters of a stack file, with overrides for the main cluster's config."""

from __future__ import annotations

from infra.cluster.cluster_spec import ClusterSpec, build_cluster_spec
from infra.etcd.spec import EVENTS, MAIN, EtcdClusterSpec, etcd_cluster_spec
from tests.helpers import raw_config


def clusters(stack: str = "prod", **etcd_changes) -> tuple[ClusterSpec, EtcdClusterSpec, EtcdClusterSpec]:
    raw = raw_config(stack)
    raw["etcd"].update(etcd_changes)
    spec = build_cluster_spec(raw, "eastus")
    return spec, etcd_cluster_spec(spec, MAIN), etcd_cluster_spec(spec, EVENTS)
