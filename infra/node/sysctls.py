"""Kernel settings every node (and NAT host) boots with: /etc/sysctl.d and /etc/modules-load.d.

Each value names its source. Kubelet runs with ``protectKernelDefaults: true``, so
the values kubelet insists on are set here too (kubelet refuses to start otherwise).
"""

from __future__ import annotations

SYSCTL_PATH = "/etc/sysctl.d/90-supercluster.conf"
MODULES_PATH = "/etc/modules-load.d/supercluster.conf"

# Loaded before systemd-sysctl runs, so the net.bridge.* and net.netfilter.* keys exist when applied.
MODULES = ("overlay", "br_netfilter", "nf_conntrack")

# The 2,500-node post: "neighbor table overflow!" once every pod IP took an ARP entry; OpenAI set
# 80000/90000/100000, which is also the maximum Azure allows (AKS custom node configuration reference).
ARP_GC_THRESH = (80_000, 90_000, 100_000)

# Kubelet's expected kernel tunables (kubernetes pkg/util/sysctl: VMOvercommitMemoryAlways,
# VMPanicOnOOMInvokeOOMKiller, KernelPanicRebootTimeout, KernelPanicOnOopsAlways, RootMaxKeysSetting,
# RootMaxBytesSetting); with protectKernelDefaults kubelet exits when any differs.
KUBELET_KERNEL_DEFAULTS = {
    "vm.overcommit_memory": 1,
    "vm.panic_on_oom": 0,
    "kernel.panic": 10,
    "kernel.panic_on_oops": 1,
    "kernel.keys.root_maxkeys": 1_000_000,
    "kernel.keys.root_maxbytes": 25_000_000,
}

# Conntrack bounds Azure vets (AKS custom node configuration reference: nf_conntrack_max 131072-2097152,
# nf_conntrack_buckets 65536-524288). kube-proxy's default sizing is 32768 per core, at least 131072
# (KubeProxyConfiguration conntrack.maxPerCore / min); we apply the same rule here, clamped to Azure's
# range, and tell kube-proxy to leave the value alone (maxPerCore: 0), so there is one owner.
CONNTRACK_PER_CORE = 32_768
CONNTRACK_MAX_RANGE = (131_072, 2_097_152)
CONNTRACK_BUCKETS_RANGE = (65_536, 524_288)


def conntrack_max(vcpus: int) -> int:
    low, high = CONNTRACK_MAX_RANGE
    return max(low, min(high, CONNTRACK_PER_CORE * vcpus))


def node_sysctls(vcpus: int) -> dict[str, int]:
    table = conntrack_max(vcpus)
    low, high = CONNTRACK_BUCKETS_RANGE
    gc1, gc2, gc3 = ARP_GC_THRESH
    return {
        "net.ipv4.neigh.default.gc_thresh1": gc1,
        "net.ipv4.neigh.default.gc_thresh2": gc2,
        "net.ipv4.neigh.default.gc_thresh3": gc3,
        "net.netfilter.nf_conntrack_max": table,
        # The kernel's own default is max/4 hash buckets per entry slot (nf_conntrack sysctl docs).
        "net.netfilter.nf_conntrack_buckets": max(low, min(high, table // 4)),
        # AKS's default (custom node configuration reference): one per-user pool that kubelet and
        # every pod's file watchers draw from.
        "fs.inotify.max_user_watches": 1_048_576,
        # Ubuntu 24.04's default; the HPC image (22.04) still ships 65530, too few for ML runtimes
        # that map many files (AKS custom node configuration reference lists both defaults).
        "vm.max_map_count": 1_048_576,
        # AKS defaults for accept and SYN queues (custom node configuration reference).
        "net.core.somaxconn": 16_384,
        "net.ipv4.tcp_max_syn_backlog": 16_384,
        # Pods are bridged (azure-vnet bridge mode): forwarding on, and bridged traffic must pass the
        # netfilter hooks so service NAT and the pod egress masquerade apply
        # (Azure/azure-container-networking/docs/cni.md).
        "net.ipv4.ip_forward": 1,
        "net.bridge.bridge-nf-call-iptables": 1,
        **KUBELET_KERNEL_DEFAULTS,
    }


def render_sysctls(values: dict[str, int]) -> str:
    lines = ["# Written by supercluster (infra/node/sysctls.py); every value names its source there."]
    lines += [f"{key} = {value}" for key, value in values.items()]
    return "\n".join(lines) + "\n"


def render_modules() -> str:
    return "\n".join(MODULES) + "\n"
