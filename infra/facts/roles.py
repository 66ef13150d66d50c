"""The cluster's machine roles, and the names one role goes by in different places.

A role's VMs live in one subnet of the system VNet (its key in the address plan), sign in as one
user-assigned managed identity (``naming.role_identity``) and are recorded under one machine role
(the ``supercluster.io_role`` tag, the day-2 rollout output, the ``supercluster.io/role`` label of a
NAT host). The names differ (the NAT hosts' subnet and identity are ``nat``, their machine role
``nat-host``), so they are tied together here once.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Role:
    """A role of dedicated VMs, declared one by one (never in a scale set)."""

    subnet: str  # its key in the address plan (infra/network/addressing.py)
    identity: str  # its managed identity's role name
    machine: str  # its tag and rollout-record name


ETCD = Role(subnet="etcd", identity="etcd", machine="etcd")
EVENTS_ETCD = Role(subnet="events-etcd", identity="events-etcd", machine="events-etcd")
APISERVER = Role(subnet="apiserver", identity="apiserver", machine="apiserver")
NAT_HOST = Role(subnet="nat", identity="nat", machine="nat-host")
DEDICATED = (ETCD, EVENTS_ETCD, APISERVER, NAT_HOST)

# Identities of what runs in the node pools' scale sets (each shard has a subnet of its own).
NODE_IDENTITY = "node"
AUTOSCALER_IDENTITY = "autoscaler"  # the cluster autoscaler, carried by system-pool nodes beside NODE_IDENTITY
# Every identity the cluster's machines carry, one each (components/identities.py), in declaration order.
IDENTITIES = (
    ETCD.identity,
    EVENTS_ETCD.identity,
    APISERVER.identity,
    NODE_IDENTITY,
    NAT_HOST.identity,
    AUTOSCALER_IDENTITY,
)

# The system VNet, and its subnet that holds only private endpoints (no VM lives there).
SYSTEM_VNET = "system"
ENDPOINTS_SUBNET = "endpoints"
# The system VNet's subnets, in address order (never reordered: each keeps its CIDR).
SYSTEM_SUBNETS = (ETCD.subnet, EVENTS_ETCD.subnet, APISERVER.subnet, NAT_HOST.subnet, ENDPOINTS_SUBNET)

# Node pool roles (``nodePools[].role``); a CPU pool's nodes and every dedicated VM boot the cpu image.
GPU_POOL = "gpu"
CPU_POOL = "cpu"
# CPU machines tainted for the add-ons that hold a cloud identity or watch the whole cluster (infra/facts/labels.py).
SYSTEM_POOL = "system"
POOL_ROLES = (GPU_POOL, CPU_POOL, SYSTEM_POOL)
