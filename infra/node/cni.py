"""Pod networking on a node: Azure CNI hands the NIC's secondary IP configurations to pods.

Every node NIC carries ``1 + podIpsPerNode`` IP configurations in its shard's subnet
(components/node_pool.py). ``azure-vnet-ipam`` reads them from the Azure host agent and
gives every non-primary one to a pod; the primary stays the node's
(Azure/azure-container-networking/docs/legacy-ipam-path.md). Pods therefore hold real VNet addresses:
no overlay, no routes. Two host rules complete it (Azure/azure-container-networking/docs/cni.md for
clusters not built by AKS):
- pod traffic to anything outside the cluster's address space is masqueraded to the
  node's address, so it can leave through Azure's outbound path;
- pods may not reach the instance metadata service, whose tokens are the node's
  managed identity (the one that can read the bootstrap token in Key Vault), nor Azure's
  host address 168.63.129.16 on the ports that serve the VM's protected settings, as AKS
  blocks them; DNS and the load balancer's probes on that address stay open.

Both drops sit in the forward hook, which only routed traffic (pods) passes, and again in the
output hook for the node's own traffic from any user but root (and, on system pools, the cluster
autoscaler's own user, ``CLOUD_IDENTITY_UID``): a host-network agent running as nobody, or whoever
escapes a container as a user, gets no token either (docs/security.md, "A node").

A third rule, in the input hook, keeps the node's own sshd from the cluster: node subnets leave SSH open
inside the cluster for MPI's launcher between pods (infra/network/security_groups.py), and pods hold
addresses of those subnets, so without it every pod could knock on its node's sshd. SSH to the node from
the cluster's address space is dropped; the hub's break-glass SSH comes from outside it, and pods' own port
22 is bridged or forwarded to them, never delivered to the host.

On the system pools a fourth, in the forward hook (which bridged pod traffic passes too:
``bridge-nf-call-iptables``), keeps the monitoring stack's unauthenticated ports (Prometheus, Alertmanager's
API and gossip, Grafana, kube-state-metrics: ``monitoring.STACK_TCP_PORTS``) to the system pools' own
subnets: no tenant pod, node, NAT host or the hub (whose service traffic the NAT hosts masquerade) gets
there; people use ``kubectl port-forward``, which enters the pod from its node and is authorized by the
apiserver. Only system pools carry it: tenants' pods may serve on the same ports.
"""

from __future__ import annotations

import json
from typing import Any

from infra.addons import monitoring
from infra.boot import systemd
from infra.boot.cloudinit import CloudConfig
from infra.facts import ports

CONFLIST_PATH = "/etc/cni/net.d/10-azure.conflist"
NFT_PATH = "/etc/supercluster/pod-network.nft"
UNIT = "supercluster-pod-network.service"
# Azure's instance metadata service (link-local, learn.microsoft.com instance-metadata-service).
IMDS_IP = "169.254.169.254"
IMDS_PORT = 80  # its HTTP endpoint (same page); the drops below cover every port
# Azure's host address (learn.microsoft.com/azure/virtual-network/what-is-ip-address-168-63-129-16):
# WireServer on TCP 80 and the HostGAPlugin on TCP 32526 hold the VM's protected settings. AKS drops
# both from pods in FORWARD and leaves the rest (UDP/TCP 53 DNS, probes) alone: Azure/AgentBaker
# PR 375 (80 only, after blocking every TCP port broke DNS over TCP) and PR 4470 (32526).
WIRESERVER_IP = "168.63.129.16"
WIRESERVER_BLOCKED_TCP_PORTS = (80, 32526)
TABLE = "supercluster"


def conflist(node_local_dns_ip: str | None) -> dict[str, Any]:
    """Azure's conflist routes NodeLocal DNSCache's link-local address via the host, so pods reach
    the node-local cache (cni/azure-linux.conflist ``ipsToRouteViaHost``); nothing when it is off."""
    return {
        "cniVersion": "0.3.0",
        "name": "azure",
        "plugins": [
            {
                "type": "azure-vnet",
                "mode": "bridge",
                "bridge": "azure0",
                "ipsToRouteViaHost": [node_local_dns_ip] if node_local_dns_ip else [],
                "ipam": {"type": "azure-vnet-ipam"},
            },
            {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True},
        ],
    }


def render_conflist(node_local_dns_ip: str | None) -> str:
    return json.dumps(conflist(node_local_dns_ip), indent=2) + "\n"


def _set(items: tuple[object, ...]) -> str:
    return "{ " + ", ".join(map(str, items)) + " }"


def monitoring_chain(sources: tuple[str, ...]) -> list[str]:
    """Forwarded traffic to the monitoring stack's ports from anywhere but ``sources`` is dropped."""
    return [
        "  chain monitoring-stack {",
        "    type filter hook forward priority filter; policy accept;",
        f"    ip saddr != {_set(sources)} tcp dport {_set(monitoring.STACK_TCP_PORTS)} drop",
        f"    ip saddr != {_set(sources)} udp dport {_set(monitoring.STACK_UDP_PORTS)} drop",
        "  }",
    ]


def render_rules(
    cluster_cidr: str, identity_uids: tuple[int, ...] = (0,), monitoring_sources: tuple[str, ...] = ()
) -> str:
    """An nftables table of our own (kube-proxy keeps its own), replaced atomically on every load.
    ``identity_uids``: the host users whose own traffic may reach the metadata service and WireServer;
    ``monitoring_sources``: on a system pool, the subnets that alone reach the monitoring stack's ports."""
    allowed = ", ".join(map(str, identity_uids))
    blocked_ports = ", ".join(map(str, WIRESERVER_BLOCKED_TCP_PORTS))
    return (
        "\n".join(
            [
                "# Written by supercluster (infra/node/cni.py).",
                f"table ip {TABLE}",
                f"delete table ip {TABLE}",
                f"table ip {TABLE} {{",
                "  chain pod-egress {",
                "    type nat hook postrouting priority srcnat; policy accept;",
                "    fib daddr type local return",
                f"    ip daddr {cluster_cidr} return",
                "    masquerade",
                "  }",
                "  chain pod-metadata {",
                "    type filter hook forward priority filter; policy accept;",
                f"    ip daddr {IMDS_IP} drop",
                f"    ip daddr {WIRESERVER_IP} tcp dport {{ {blocked_ports} }} drop",
                "  }",
                "  chain host-metadata {",
                "    type filter hook output priority filter; policy accept;",
                f"    ip daddr {IMDS_IP} meta skuid != {{ {allowed} }} drop",
                f"    ip daddr {WIRESERVER_IP} tcp dport {{ {blocked_ports} }} meta skuid != {{ {allowed} }} drop",
                "  }",
                "  chain host-ssh {",
                "    type filter hook input priority filter; policy accept;",
                f'    iifname != "lo" ip saddr {cluster_cidr} tcp dport {ports.SSH} drop',
                "  }",
                *(monitoring_chain(monitoring_sources) if monitoring_sources else []),
                "}",
            ]
        )
        + "\n"
    )


def add_pod_network(
    cloud: CloudConfig,
    cluster_cidr: str,
    node_local_dns_ip: str | None,
    identity_uids: tuple[int, ...] = (0,),
    monitoring_sources: tuple[str, ...] = (),
) -> None:
    cloud.add(CONFLIST_PATH, render_conflist(node_local_dns_ip), permissions="0600")  # CIS 1.1.9, root's only
    cloud.add(NFT_PATH, render_rules(cluster_cidr, identity_uids, monitoring_sources))
    cloud.add(
        f"/etc/systemd/system/{UNIT}",
        systemd.unit(
            "Pod egress masquerade, metadata/WireServer block, sshd closed to the cluster (nftables)",
            ["/usr/sbin/nft", "-f", NFT_PATH],
            after=["network-pre.target"],
            service={"Type": "oneshot", "RemainAfterExit": "true", "Restart": "no"},
            unit_extra={"Before": "kubelet.service"},
        ),
    )
