"""NodeLocal DNSCache: a DNS cache on every node, so most lookups never leave the node.

Follows kubernetes/kubernetes cluster/addons/dns/nodelocaldns/nodelocaldns.yaml for
kube-proxy's iptables/nftables modes: node-cache listens on a link-local address *and* on
the kube-dns service IP, so kubelet's ``clusterDNS`` stays the service IP and pods need no
change. Cluster names go to CoreDNS over TCP (``force_tcp``: no conntrack races on UDP);
everything else goes to the node's own upstream resolvers, so external lookups spread over
every VM's Azure DNS allowance instead of concentrating on the CoreDNS nodes.

node-cache (k8s.io/dns cmd/node-cache) runs as root with every capability dropped but the two it uses:
NET_BIND_SERVICE to bind port 53, NET_ADMIN to add its interface's addresses over netlink and its
NOTRACK/ACCEPT rules through the image's iptables (nft mode on these nodes, which needs no raw socket).
Root because Kubernetes grants added capabilities to a non-root process only in its bounding set
(no ambient capabilities), so as any other user node-cache could do neither. The root filesystem is
read-only: the one file node-cache writes, the Corefile it derives from the ConfigMap's base one
(``-conf``), goes to an emptyDir.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from infra.addons import coredns, images, k8s
from infra.addons.corefile import ServerBlock, d, render
from infra.addons.settings import section
from infra.addons.shared_names import NODE_CRITICAL, SYSTEM_NAMESPACE
from infra.config.cluster_config import ClusterConfig
from infra.config.errors import ConfigError
from infra.network.addressing import CLUSTER_DOMAIN, AddressPlan

KEY = "nodeLocalDns"
NAME = "node-local-dns"
UPSTREAM_SERVICE = "kube-dns-upstream"
METRICS_PORT = 9253
HEALTH_PORT = 8080  # node-cache's default health port
# node-cache's own metrics (its set-up error counters; the DNS metrics are CoreDNS's, on METRICS_PORT): its
# -metrics-listen-address flag defaults to 0.0.0.0:9353 (k8s.io/dns cmd/node-cache/main.go), every address of
# the node's host network and so reachable from every pod. Nothing scrapes them, so they listen on the
# node's loopback only, which no pod shares.
OWN_METRICS_ADDRESS = "127.0.0.1:9353"
# The conventional NodeLocal DNSCache address (kubernetes.io/docs/tasks/administer-cluster/nodelocaldns);
# Azure CNI routes it via the host ("ipsToRouteViaHost" in azure-linux.conflist).
DEFAULT_LOCAL_IP = "169.254.20.10"
# RFC 3927 §2.1: the first and last 256 addresses of 169.254.0.0/16 are reserved and never a host's;
# 169.254.169.254 is Azure's instance metadata service
# (learn.microsoft.com/azure/virtual-machines/instance-metadata-service).
USABLE_LINK_LOCAL = range(int(ipaddress.IPv4Address("169.254.1.0")), int(ipaddress.IPv4Address("169.254.254.255")) + 1)
IMDS_ADDRESS = ipaddress.IPv4Address("169.254.169.254")
LOCAL_IP_ACCEPTED = (
    "a usable link-local IPv4 host address, 169.254.1.0 to 169.254.254.255 (RFC 3927), "
    "other than Azure's metadata service 169.254.169.254"
)
# node-cache replaces this token with the kube-dns-upstream service IP it reads from the
# environment (-upstreamsvc); it is node-cache's own runtime syntax, not a template of ours.
CLUSTER_DNS_TOKEN = "__PILLAR__CLUSTER__DNS__"
# Where the ConfigMap's base Corefile is mounted (read-only), and the emptyDir node-cache writes the
# Corefile it serves into.
CONFIG_DIR = "/etc/coredns"
BASE_COREFILE = "Corefile.base"
RUNTIME_DIR = "/run/node-cache"


@dataclass(frozen=True)
class Settings:
    local_ip: str = DEFAULT_LOCAL_IP


def parse(raw: Mapping[str, Any], config: ClusterConfig) -> Settings:
    s = section(KEY, raw)
    local_ip = s.string("localIp", DEFAULT_LOCAL_IP, accepted=LOCAL_IP_ACCEPTED)
    s.done()
    try:
        address = ipaddress.IPv4Address(local_ip)
    except ValueError:
        address = None
    if address is None or int(address) not in USABLE_LINK_LOCAL or address == IMDS_ADDRESS:
        raise ConfigError(s.key("localIp"), local_ip, LOCAL_IP_ACCEPTED)
    return Settings(local_ip=local_ip)


def node_local_ip(config: ClusterConfig) -> str | None:
    """The address pods reach the node-local cache at, which every node's CNI routes via the host;
    None when the add-on is off. Read by the node renderers (infra.node.pool) from the same settings."""
    if not config.addons.node_local_dns.enabled:
        return None
    return parse(config.addons.node_local_dns.settings, config).local_ip


def corefile(local_ip: str, dns_service_ip: str) -> str:
    bind = d("bind", local_ip, dns_service_ip)

    def cluster_zone(zone: str) -> ServerBlock:
        return ServerBlock(
            (f"{zone}:53",),
            (
                d("errors"),
                d("cache", block=(d("success", "9984", "30"), d("denial", "9984", "5"))),
                d("reload"),
                d("loop"),
                bind,
                d("forward", ".", CLUSTER_DNS_TOKEN, block=(d("force_tcp"),)),
                d("prometheus", f":{METRICS_PORT}"),
                *((d("health", f"{local_ip}:{HEALTH_PORT}"),) if zone == CLUSTER_DOMAIN else ()),
            ),
        )

    return render(
        [
            cluster_zone(CLUSTER_DOMAIN),
            cluster_zone("in-addr.arpa"),
            cluster_zone("ip6.arpa"),
            ServerBlock(
                (".:53",),
                (
                    d("errors"),
                    d("cache", "30"),
                    d("reload"),
                    d("loop"),
                    bind,
                    # The node's real upstream servers, not the pod's resolv.conf: with
                    # ClusterFirstWithHostNet that file points back at this cache.
                    d("forward", ".", f"{coredns.UPSTREAM_RESOLV_DIR}/resolv.conf"),
                    d("prometheus", f":{METRICS_PORT}"),
                ),
            ),
        ]
    )


def objects(addresses: AddressPlan, settings: Settings) -> list[k8s.Obj]:
    ns = SYSTEM_NAMESPACE
    dns_ip = addresses.dns_service_ip
    container = {
        "name": "node-cache",
        "image": images.NODE_LOCAL_DNS,
        "args": [
            "-localip",
            f"{settings.local_ip},{dns_ip}",
            "-basecorefile",
            f"{CONFIG_DIR}/{BASE_COREFILE}",
            "-conf",
            f"{RUNTIME_DIR}/Corefile",
            "-upstreamsvc",
            UPSTREAM_SERVICE,
            "-metrics-listen-address",
            OWN_METRICS_ADDRESS,
        ],
        "ports": [
            {"name": "dns", "containerPort": 53, "protocol": "UDP"},
            {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        "resources": k8s.resources("25m", "32Mi", "128Mi"),
        # Root with only these two capabilities, on a read-only root (module docstring).
        "securityContext": k8s.locked_down("NET_ADMIN", "NET_BIND_SERVICE", as_nobody=False),
        "livenessProbe": {
            "httpGet": {"host": settings.local_ip, "path": "/health", "port": HEALTH_PORT},
            "initialDelaySeconds": 60,
            "timeoutSeconds": 5,
        },
        "volumeMounts": [
            {"name": "xtables-lock", "mountPath": "/run/xtables.lock"},
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "runtime", "mountPath": RUNTIME_DIR},
            {"name": "upstream", "mountPath": coredns.UPSTREAM_RESOLV_DIR, "readOnly": True},
        ],
    }
    pod = k8s.pod_spec(
        [container],
        priority_class=NODE_CRITICAL,
        service_account=NAME,
        host_network=True,
        # node-cache never calls the apiserver: it learns the upstream service from its environment.
        automountServiceAccountToken=False,
        tolerations=k8s.tolerate_everything(),
        volumes=[
            {"name": "xtables-lock", "hostPath": {"path": "/run/xtables.lock", "type": "FileOrCreate"}},
            {"name": "config", "configMap": {"name": NAME, "items": [{"key": "Corefile", "path": BASE_COREFILE}]}},
            {"name": "runtime", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
            {
                "name": "upstream",
                "hostPath": {"path": coredns.HOST_UPSTREAM_RESOLV_CONF.rsplit("/", 1)[0], "type": "Directory"},
            },
        ],
    )
    return [
        k8s.service_account(NAME, ns, automount=False),
        # A second service over the CoreDNS pods: node-cache binds the kube-dns IP itself, so
        # it needs another address to reach CoreDNS.
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": k8s.metadata(UPSTREAM_SERVICE, ns, app=NAME),
            "spec": {
                "selector": dict(coredns.SELECTOR),
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                ],
            },
        },
        k8s.config_map(NAME, ns, {"Corefile": corefile(settings.local_ip, dns_ip)}),
        # It binds both addresses on every node it runs on: the link-local one and kubelet's clusterDNS.
        k8s.daemon_set(NAME, ns, pod, {"k8s-app": NAME}, "10%", provides=[f"dns:{settings.local_ip}", f"dns:{dns_ip}"]),
    ]
