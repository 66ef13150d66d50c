"""A Kubernetes node's cloud-init, built from plain parameters: node pools and NAT hosts both use it.

``node_cloud_config(NodeSpec(...))`` returns the ``CloudConfig`` of a machine that joins
the cluster as a node: kernel settings, local SSDs for kubelet and containerd, pinned
binaries, Azure CNI, preloaded images, GPU checks, kubelet (TLS bootstrap) and kube-proxy.
Boot order (systemd, every boot):

    local disk ─┐
    install ────┼─> containerd ─> preload images ─┐
    pod network ┘                                 ├─> kubelet ─> kube-proxy
    Key Vault secrets (bootstrap token, CA) ──────┤
    GPU check (GPU nodes) ────────────────────────┤
    before_kubelet hooks (e.g. traffic accounting)┘

Nothing here is secret: the bootstrap token and the cluster CA are fetched from Key Vault
at boot (``infra.boot.secrets``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from infra.boot.cloudinit import CloudConfig
from infra.boot.secret_names import NODE_JOIN_FILES
from infra.boot.secrets import add_secret_fetching
from infra.config.cluster_config import Taint
from infra.node import (
    cni,
    containerd,
    gpu,
    install,
    join,
    kube_proxy,
    kubelet,
    pinned_images,
    seccomp,
    state_disk,
    sysctls,
)
from infra.node.state_disk import LocalDisks

# Debian packages the boot scripts use that a marketplace Ubuntu image may lack.
PACKAGES = ("ebtables", "mdadm", "nftables", "conntrack")


@dataclass(frozen=True)
class NodeSpec:
    kubernetes_version: str
    apiserver_endpoint: str  # https://<apiserver load balancer>:6443
    cluster_dns: str  # the cluster DNS service IP
    cluster_cidr: str  # the address space every pod address lives in (network.addressSpace)
    vault_name: str  # Key Vault holding the cluster CA and the bootstrap token
    identity: str  # the role identity that reads them (infra.config.naming.role_identity_below_subscription)
    registry_login_server: str  # the cluster's registry, e.g. prodacr1a2b3c.azurecr.io
    images: tuple[str, ...]  # preloaded and pinned; the first is containerd's sandbox (pause) image
    local_disks: LocalDisks
    vcpus: int
    max_pods: int
    labels: Mapping[str, str] = field(default_factory=dict)  # all it registers with: infra.facts.labels.node_labels
    taints: tuple[Taint, ...] = ()
    gpus: int = 0
    nvswitch: bool = False
    infiniband: bool = False  # its jobs use RDMA over InfiniBand (containerd lifts the memlock limit)
    node_local_dns_ip: str | None = None  # routed via the host by the CNI (addons.nodeLocalDns.localIp)
    # The host users that may reach the metadata service (root; on system pools the autoscaler's user too).
    identity_uids: tuple[int, ...] = (0,)
    # On system pools: the subnets that alone reach the monitoring stack's ports (infra/node/cni.py).
    monitoring_sources: tuple[str, ...] = ()

    @property
    def node_taints(self) -> tuple[Taint, ...]:
        return self.taints + ((gpu.UNHEALTHY_TAINT,) if self.gpus else ())


def node_cloud_config(spec: NodeSpec, before_kubelet: Sequence[Callable[[CloudConfig], None]] = ()) -> CloudConfig:
    """The node's cloud-init. ``before_kubelet``: callables that add their own boot steps, ordered
    before kubelet; this is where the integrator passes traffic accounting (its mangle rules)."""
    cloud = CloudConfig(packages=list(PACKAGES))
    cloud.add(sysctls.SYSCTL_PATH, sysctls.render_sysctls(sysctls.node_sysctls(spec.vcpus)))
    cloud.add(sysctls.MODULES_PATH, sysctls.render_modules())
    # First boot only: cloud-init wrote the files after systemd had applied /etc; later boots apply them early.
    cloud.runcmd += [
        ["systemctl", "daemon-reload"],
        ["systemctl", "restart", "systemd-modules-load.service"],
        ["sysctl", "--system"],
    ]
    state_disk.add_local_disk(cloud, spec.local_disks)
    install.add_install(cloud, spec.kubernetes_version)
    cni.add_pod_network(cloud, spec.cluster_cidr, spec.node_local_dns_ip, spec.identity_uids, spec.monitoring_sources)
    cloud.add(containerd.CONFIG_PATH, containerd.render_config(spec.images[0], gpu=spec.gpus > 0))
    cloud.add(f"/etc/systemd/system/{containerd.UNIT}", containerd.unit(rdma=spec.infiniband))
    pinned_images.add_preload(cloud, spec.registry_login_server, spec.images)
    if spec.gpus:
        gpu.add_gpu_check(cloud, spec.gpus, spec.nvswitch)
    add_secret_fetching(cloud, spec.vault_name, NODE_JOIN_FILES, before=[kubelet.UNIT], identity=spec.identity)
    kubelet.add_kubelet(
        cloud,
        server=spec.apiserver_endpoint,
        cluster_dns=spec.cluster_dns,
        max_pods=spec.max_pods,
        labels=spec.labels,
        taints=spec.node_taints,
        gpu=spec.gpus > 0,
        registry=spec.registry_login_server,
    )
    join.add_node_join(cloud, spec.apiserver_endpoint)
    seccomp.add_seccomp(cloud)
    kube_proxy.add_kube_proxy(cloud, server=spec.apiserver_endpoint, cluster_cidr=spec.cluster_cidr)
    for add_step in before_kubelet:
        add_step(cloud)
    units = [state_disk.UNIT, install.UNIT, cni.UNIT, containerd.UNIT, pinned_images.UNIT, seccomp.UNIT]
    units += [gpu.UNIT] if spec.gpus else []
    cloud.runcmd.append(["systemctl", "enable", "--now", *units, kubelet.UNIT, kube_proxy.UNIT])
    return cloud


def node_cloud_configs(
    specs: Sequence[NodeSpec], before_kubelet: Sequence[Callable[[CloudConfig], None]] = ()
) -> list[CloudConfig]:
    """The cloud-init of each of ``specs``, nodes that differ at most in their labels (the shards of an
    InfiniBand pool: one domain label each). The first is built, the others relabelled from it
    (``kubelet.relabelled``): building one costs milliseconds, and a 30,000-node plan has 243 shards."""
    first = node_cloud_config(specs[0], before_kubelet)
    found = [first]
    for spec in specs[1:]:
        if replace(spec, labels=specs[0].labels) != specs[0]:
            raise ValueError(f"nodes that differ in more than their labels: {spec} and {specs[0]}")
        found.append(kubelet.relabelled(first, spec.labels, gpu=spec.gpus > 0))
    return found
