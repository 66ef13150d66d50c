"""Network security groups as plain data: who may reach etcd, the apiservers, SSH, and the service range.

Azure evaluates an NSG's inbound rules by priority (lowest number first, first match
wins) and ends with its default rules, the first of which, ``AllowVnetInBound``,
allows anything from the ``VirtualNetwork`` tag: every cluster VNet, every peered VNet
(the hub) and whatever reaches us through a gateway. That is far too wide for etcd and
the apiservers, so each sensitive port gets explicit allows followed by an explicit deny
from anywhere, ahead of the defaults (learn.microsoft.com/azure/virtual-network/
network-security-groups-overview, "Default security rules").

The component (``components/network.py``) maps these specs onto azure-native NSGs; the
symbolic source ``HUB`` becomes the hub's address prefixes, which for a hub read from
another stack are only known at deploy time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from infra.config.cluster_config import ClusterConfig
from infra.facts import ports
from infra.facts.labels import MONITORING_ROLE
from infra.network.addressing import AddressPlan

# Symbolic source: the hub's address prefixes (researchers, VPN clients).
HUB = "hub"
# Azure service tags (learn.microsoft.com/azure/virtual-network/service-tags-overview).
INTERNET = "Internet"
AZURE_LOAD_BALANCER = "AzureLoadBalancer"  # the source of load balancer health probes (168.63.129.16)
ANY = "*"

APISERVER_PORT = str(ports.APISERVER)
ETCD_CLIENT_PORT = str(ports.ETCD_CLIENT)
ETCD_PORTS = f"{ports.ETCD_CLIENT}-{ports.ETCD_PEER}"  # client and peer
ETCD_METRICS_PORT = str(ports.ETCD_METRICS)  # plain HTTP, no client certificate: scraped by Prometheus only
SSH_PORT = str(ports.SSH)
# The HTTPS /metrics ports of kube-controller-manager and kube-scheduler on each apiserver VM (bound to
# the VM's address, CIS 1.3.7/1.4.2 deviation in docs/cis-benchmark.md), and the bootstrap-token minter's
# plain-HTTP one (the token's mint time, no secret): scraped by Prometheus only.
CONTROL_PLANE_METRICS_PORTS = (str(ports.CONTROLLER_MANAGER), str(ports.SCHEDULER), str(ports.TOKEN_MINTER_METRICS))

# Custom rule priorities run from 100 to 4096 (same page, "Security rules"). Allows come first,
# then the deny for each sensitive port, then the catch-all deny from the internet.
_ALLOW = 100
_DENY = 3000
_DENY_INTERNET = 4096


@dataclass(frozen=True)
class SecurityRule:
    name: str
    priority: int
    access: str  # "Allow" | "Deny"
    protocol: str  # "Tcp" | "Udp" | "*"
    sources: tuple[str, ...]  # CIDRs, service tags, "*" or HUB
    ports: tuple[str, ...] = (ANY,)  # destination ports or ranges such as "2379-2380"
    destinations: tuple[str, ...] = (ANY,)
    description: str = ""
    direction: str = "Inbound"


@dataclass(frozen=True)
class SecurityGroup:
    key: str  # "etcd", "apiserver", ..., "nodes"
    subnets: tuple[str, ...]  # keys of the subnets it is attached to
    rules: tuple[SecurityRule, ...]


def monitoring_pools(config: ClusterConfig) -> tuple[str, ...]:
    """The pools Prometheus may be scheduled on (``MONITORING_ROLE``, its nodeSelector)."""
    return tuple(pool.name for pool in config.node_pools if pool.role == MONITORING_ROLE)


def monitoring_subnets(plan: AddressPlan, monitoring_pools: Sequence[str]) -> tuple[str, ...]:
    """Every subnet of the ``monitoring_pools``: Prometheus's and the rest of the monitoring stack's pod addresses."""
    return tuple(str(s.cidr) for v in plan.vnets if v.pool in monitoring_pools for s in v.subnets)


def security_groups(plan: AddressPlan, *, monitoring_pools: Sequence[str]) -> tuple[SecurityGroup, ...]:
    """One NSG per system subnet and one shared by every node-pool shard subnet. ``monitoring_pools``
    are the pools whose subnets (Prometheus's pod addresses) reach etcd's metrics port and the
    controller-manager's and scheduler's."""
    cluster = tuple(str(r) for r in plan.cluster_ranges)
    apiservers = str(plan.subnet("apiserver").cidr)
    monitoring = monitoring_subnets(plan, monitoring_pools)
    node_subnets = tuple(s.key for v in plan.vnets if v.pool is not None for s in v.subnets)
    groups = [
        SecurityGroup("etcd", ("etcd",), _etcd_rules(plan, "etcd", apiservers, monitoring)),
        SecurityGroup("events-etcd", ("events-etcd",), _etcd_rules(plan, "events-etcd", apiservers, monitoring)),
        SecurityGroup(
            "apiserver",
            ("apiserver",),
            (
                SecurityRule(
                    "allow-apiserver-from-hub",
                    _ALLOW,
                    "Allow",
                    "Tcp",
                    (HUB,),
                    (APISERVER_PORT,),
                    description="researchers' kubectl through the hub",
                ),
                SecurityRule(
                    "allow-apiserver-from-cluster",
                    _ALLOW + 10,
                    "Allow",
                    "Tcp",
                    cluster,
                    (APISERVER_PORT,),
                    description="kubelets, pods, NAT hosts and other apiservers",
                ),
                SecurityRule(
                    "allow-apiserver-probe",
                    _ALLOW + 20,
                    "Allow",
                    "Tcp",
                    (AZURE_LOAD_BALANCER,),
                    (APISERVER_PORT,),
                    description="the internal load balancer's /readyz probe",
                ),
                SecurityRule(
                    "deny-apiserver",
                    _DENY,
                    "Deny",
                    "Tcp",
                    (ANY,),
                    (APISERVER_PORT,),
                    description=f"nothing else reaches {APISERVER_PORT}",
                ),
                *_control_plane_metrics_rules(monitoring),
                *_common_rules(),
            ),
        ),
        SecurityGroup(
            "nat",
            ("nat",),
            (
                # The hub routes serviceCidr to the NAT hosts' load balancer; the packets still carry
                # the service IP as destination, which no VNet default rule covers.
                SecurityRule(
                    "allow-services-from-hub",
                    _ALLOW,
                    "Allow",
                    ANY,
                    (HUB,),
                    destinations=(str(plan.service_cidr),),
                    description="researchers reach the service range through the NAT hosts",
                ),
                *_common_rules(),
            ),
        ),
        SecurityGroup("endpoints", ("endpoints",), _common_rules()),
        # MPI launches its ranks over SSH between pods, on pod IPs (7,500-node post), so inside the
        # cluster port 22 stays open on node subnets.
        SecurityGroup(
            "nodes",
            node_subnets,
            (
                SecurityRule(
                    "allow-ssh-between-pods",
                    _ALLOW,
                    "Allow",
                    "Tcp",
                    cluster,
                    (SSH_PORT,),
                    description="MPI over SSH between pods",
                ),
                *_common_rules(),
            ),
        ),
    ]
    return tuple(groups)


def _control_plane_metrics_rules(monitoring: tuple[str, ...]) -> tuple[SecurityRule, ...]:
    # Without a monitoring pool nobody scrapes them, and the deny closes both ports to all.
    allow = (
        (
            SecurityRule(
                "allow-control-plane-metrics-from-monitoring",
                _ALLOW + 30,
                "Allow",
                "Tcp",
                monitoring,
                CONTROL_PLANE_METRICS_PORTS,
                description="Prometheus, on the monitoring pools' subnets",
            ),
        )
        if monitoring
        else ()
    )
    return (
        *allow,
        SecurityRule(
            "deny-control-plane-metrics",
            _DENY + 10,
            "Deny",
            "Tcp",
            (ANY,),
            CONTROL_PLANE_METRICS_PORTS,
            description="nothing else reaches the controller-manager's, scheduler's and token minter's metrics",
        ),
    )


def _etcd_rules(
    plan: AddressPlan, subnet_key: str, apiservers: str, monitoring: tuple[str, ...]
) -> tuple[SecurityRule, ...]:
    members = str(plan.subnet(subnet_key).cidr)
    # Without a monitoring pool nobody scrapes etcd, and the deny below closes its metrics port to all.
    metrics = (
        (
            SecurityRule(
                "allow-etcd-metrics-from-monitoring",
                _ALLOW + 20,
                "Allow",
                "Tcp",
                monitoring,
                (ETCD_METRICS_PORT,),
                description="Prometheus, on the monitoring pools' subnets",
            ),
        )
        if monitoring
        else ()
    )
    return (
        SecurityRule(
            "allow-etcd-client-from-apiservers",
            _ALLOW,
            "Allow",
            "Tcp",
            (apiservers,),
            (ETCD_CLIENT_PORT,),
            description="kube-apiserver is etcd's only client",
        ),
        SecurityRule(
            "allow-etcd-from-peers",
            _ALLOW + 10,
            "Allow",
            "Tcp",
            (members,),
            (ETCD_PORTS,),
            description="raft peer traffic and member health checks",
        ),
        SecurityRule(
            "deny-etcd",
            _DENY,
            "Deny",
            "Tcp",
            (ANY,),
            (ETCD_PORTS,),
            description=f"nothing else reaches {ports.ETCD_CLIENT}/{ports.ETCD_PEER}",
        ),
        *metrics,
        SecurityRule(
            "deny-etcd-metrics",
            _DENY + 10,
            "Deny",
            "Tcp",
            (ANY,),
            (ETCD_METRICS_PORT,),
            description="nothing else reaches etcd's plain-HTTP metrics",
        ),
        *_common_rules(),
    )


def _common_rules() -> tuple[SecurityRule, ...]:
    return (
        SecurityRule(
            "allow-ssh-from-hub",
            _ALLOW + 900,
            "Allow",
            "Tcp",
            (HUB,),
            (SSH_PORT,),
            description="break-glass SSH only through the hub",
        ),
        SecurityRule(
            "deny-ssh",
            _DENY + 100,
            "Deny",
            "Tcp",
            (ANY,),
            (SSH_PORT,),
            description="no SSH from anywhere else, including other cluster machines",
        ),
        # The hub is inside Azure's VirtualNetwork tag (it is peered), so AllowVnetInBound would let it reach
        # every port not denied above: kubelet, the exporters, etcd's backup metrics, pods. It gets what
        # docs/network.md gives it (6443, SSH, the service range through the NAT hosts) and nothing else.
        SecurityRule(
            "deny-hub",
            _DENY + 200,
            "Deny",
            ANY,
            (HUB,),
            description="the hub reaches only what an allow above names",
        ),
        SecurityRule(
            "deny-internet-inbound",
            _DENY_INTERNET,
            "Deny",
            ANY,
            (INTERNET,),
            description="nothing from the internet, whatever a later rule or public IP allows",
        ),
    )


def subnet_security_groups(plan: AddressPlan) -> dict[str, str]:
    """``{subnet key: NSG key}`` for every subnet of the plan."""
    mapping = {}
    for group in security_groups(plan, monitoring_pools=()):  # rules aside, the same groups and subnets
        for subnet in group.subnets:
            mapping[subnet] = group.key
    missing = [s.key for v in plan.vnets for s in v.subnets if s.key not in mapping]
    if missing:
        raise ValueError(f"subnets without a security group: {missing}")
    return mapping
