"""kube-proxy on every node (and NAT host), as a host service in nftables mode.

nftables mode: verdict maps make service lookup O(1) where iptables mode walks O(n)
rules, and the official 5,000-node scale test runs it (KEP-3866; beta and on by
default in 1.31, GA in 1.33; kubernetes.md §8d). kube-proxy authenticates with the
node's own rotated kubelet certificate, so no extra credential ships to machines;
RBAC for it is in ``infra/control_plane/cluster_objects.py`` (``system:node-proxier``).
"""

from __future__ import annotations

from typing import Any

from infra.boot import systemd, yaml_text
from infra.boot.cloudinit import CloudConfig
from infra.node import install, kubelet

UNIT = "kube-proxy.service"
CONFIG_PATH = "/etc/kubernetes/kube-proxy-config.yaml"
KUBECONFIG = "/etc/kubernetes/kube-proxy.conf"
# kube-proxy's default ports (kubernetes.io/docs/reference/command-line-tools-reference/kube-proxy/:
# --healthz-bind-address 0.0.0.0:10256, --metrics-bind-address 127.0.0.1:10249): health on every address
# (the NAT hosts' load balancer probes it), metrics on localhost only (CIS 4.3.1); no add-on may bind
# either port (infra.cluster.node_checks).
HEALTHZ_PORT = 10256
METRICS_PORT = 10249


def config(cluster_cidr: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "nftables",
        "clientConnection": {"kubeconfig": KUBECONFIG},
        # Every pod address is inside the cluster's address space (alias IPs from the pool VNets):
        # traffic to a service from outside it (researchers through the NAT hosts) is masqueraded.
        "clusterCIDR": cluster_cidr,
        "detectLocalMode": "ClusterCIDR",
        # 0 = leave nf_conntrack_max alone: infra/node/sysctls.py owns it (KubeProxyConfiguration docs).
        "conntrack": {"maxPerCore": 0, "min": 0},
        "healthzBindAddress": f"0.0.0.0:{HEALTHZ_PORT}",
        # Nothing scrapes it from outside the node; CIS 4.3.1 wants it on localhost only.
        "metricsBindAddress": f"127.0.0.1:{METRICS_PORT}",
    }


def unit() -> str:
    return systemd.unit(
        "kube-proxy: Kubernetes service routing (nftables)",
        [f"{install.BIN}/kube-proxy", *systemd.flags({"config": CONFIG_PATH})],
        after=[kubelet.UNIT, install.UNIT],
        requires=[install.UNIT],
        # kube-proxy starts once kubelet has bootstrapped the node certificate it uses.
        service={
            "ExecStartPre": f"/bin/sh -c 'until [ -s {kubelet.CLIENT_CERT} ]; do sleep 2; done'",
            "TimeoutStartSec": "infinity",
            "Restart": "always",
            "RestartSec": "5",
        },
    )


def add_kube_proxy(cloud: CloudConfig, *, server: str, cluster_cidr: str) -> None:
    cloud.add(CONFIG_PATH, yaml_text.dump(config(cluster_cidr), sort_keys=False))
    cloud.add(
        KUBECONFIG, yaml_text.dump(kubelet.node_kubeconfig(server), sort_keys=False), permissions=kubelet.PRIVATE
    )  # CIS 4.1.3
    cloud.add(f"/etc/systemd/system/{UNIT}", unit())
