"""The config contract: raw stack config in, a validated ``ClusterConfig`` out.

``parse_config`` is the only way a config enters the program. It checks types,
ranges, unknown keys and the cross-field rules below, and raises ``ConfigError``
(one line: key, value, what is accepted) on the first problem, before any
resource is declared. Every key is documented in README.md ("Config reference").
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from infra.errors import ConfigError
from infra.images import ACCEPTED as IMAGE_ACCEPTED
from infra.images import parse_image
from infra.labels import DERIVED_LABELS, POOL_ROLES, ROLE_GPU
from infra.schema import Section
from infra.vm_sizes import VM_SIZES, VmSize, known_sizes

# Azure: a private IP limit per VNet of 65,536 and 128,000 across a group of peered VNets
# (learn.microsoft.com azure-subscription-service-limits#networking-limits).
DEFAULT_MAX_PRIVATE_IPS_PER_VNET = 65_536
DEFAULT_MAX_PRIVATE_IPS_PER_PEERED_GROUP = 128_000
# Azure: at most 256 private IP addresses per NIC (same limits page); one is the node's own.
MAX_POD_IPS_PER_NODE = 255
# etcd's default backend quota is 2 GiB; the 2,500-node post hit it and the cluster stopped
# taking writes. etcd warns above 8 GiB ("suggested maximum", etcd v3.5 dev-guide/limit.md);
# the official 5,000-node scale test runs 20 GiB, which is our ceiling.
MIN_ETCD_QUOTA_BYTES = 2 * 1024**3
MAX_ETCD_QUOTA_BYTES = 20 * 1024**3

# network.addressSpace is cut into 64 equal blocks: block 0 for the control plane, 1..63 for pools.
ADDRESS_BLOCKS = 64
MAX_ADDRESS_SLOT = ADDRESS_BLOCKS - 1
POOL_NAME_PATTERN = r"[a-z][a-z0-9]{0,11}"
CLUSTER_NAME_PATTERN = r"[a-z][a-z0-9-]{1,18}[a-z0-9]"
KUBERNETES_VERSION_PATTERN = r"1\.(3[1-4])\.\d{1,2}"
# An Azure Compute Gallery image version: MAJOR.MINOR.PATCH, each within a 32-bit integer (Gallery Image
# Versions REST API, galleryImageVersionName: "digits must be within the range of a 32-bit integer").
MACHINE_IMAGE_VERSION_PATTERN = r"(0|[1-9]\d{0,9})\.(0|[1-9]\d{0,9})\.(0|[1-9]\d{0,9})"
MACHINE_IMAGE_VERSION_ACCEPTED = ("a Compute Gallery image version MAJOR.MINOR.PATCH, each part a whole number "
                                  "from 0 to 2147483647, quoted in YAML (e.g. \"1.0.0\")")
STACK_REF_PATTERN = r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+"
# Kubernetes label keys: optional DNS-subdomain prefix, then a name of at most 63 characters.
LABEL_KEY_PATTERN = r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
LABEL_VALUE_PATTERN = r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclass(frozen=True)
class HubConfig:
    """Researchers' entry point: either peer to another team's hub or create one here."""

    stack: str | None = None
    address_space: ipaddress.IPv4Network | None = None


@dataclass(frozen=True)
class NatHostsConfig:
    count: int
    vm_size: str


@dataclass(frozen=True)
class NetworkConfig:
    address_space: ipaddress.IPv4Network
    service_cidr: ipaddress.IPv4Network
    hub: HubConfig
    nat_hosts: NatHostsConfig
    max_private_ips_per_vnet: int = DEFAULT_MAX_PRIVATE_IPS_PER_VNET
    max_private_ips_per_peered_group: int = DEFAULT_MAX_PRIVATE_IPS_PER_PEERED_GROUP


@dataclass(frozen=True)
class EtcdConfig:
    members: int
    vm_size: str
    quota_backend_bytes: int


@dataclass(frozen=True)
class ControlPlaneConfig:
    apiservers: int
    vm_size: str


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}"


@dataclass(frozen=True)
class NodePoolConfig:
    name: str
    role: str  # "gpu" | "cpu"
    vm_size: str
    min_nodes: int
    max_nodes: int
    pod_ips_per_node: int
    infiniband: bool
    # The pool's fixed block of network.addressSpace (its VNet). Never change or reuse it:
    # it is what keeps a pool's subnets where they are when other pools come and go.
    address_slot: int
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    # A retired pool gets no new nodes (autoscaler max 0); only a retired pool may be removed.
    retired: bool = False

    @property
    def size(self) -> VmSize:
        return VM_SIZES[self.vm_size]


@dataclass(frozen=True)
class AddonToggle:
    enabled: bool
    settings: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AddonsConfig:
    coredns: AddonToggle
    node_local_dns: AddonToggle
    cluster_autoscaler: AddonToggle
    balloons: AddonToggle
    nvidia_device_plugin: AddonToggle
    gpu_health_check: AddonToggle
    traffic_accounting: AddonToggle
    monitoring: AddonToggle


@dataclass(frozen=True)
class ImagesConfig:
    """Images every node holds before kubelet starts, so no public registry can stop a node."""

    preload: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClusterConfig:
    cluster_name: str
    kubernetes_version: str
    admin_ssh_public_key: str
    location: str
    network: NetworkConfig
    etcd: EtcdConfig
    events_etcd: EtcdConfig
    control_plane: ControlPlaneConfig
    node_pools: tuple[NodePoolConfig, ...]
    addons: AddonsConfig
    images: ImagesConfig = ImagesConfig()
    # The gallery image version every machine boots (infra/machine_image.py, docs/node-image.md).
    machine_image_version: str = "1.0.0"

    @property
    def max_nodes_total(self) -> int:
        return sum(pool.max_nodes for pool in self.node_pools if not pool.retired)

    def pool(self, name: str) -> NodePoolConfig:
        return next(p for p in self.node_pools if p.name == name)


# --------------------------------------------------------------------------- parsing

LOCATION_KEY = "azure-native:location"


def parse_config(raw: Mapping[str, Any], location: Any) -> ClusterConfig:
    """Validate the ``supercluster:*`` keys (without the namespace) and the Azure location."""
    top = Section(raw, "")
    if not isinstance(location, str) or not re.fullmatch(r"[a-z0-9]+", location or ""):
        raise ConfigError(LOCATION_KEY, location, "an Azure region name such as eastus or westeurope")
    config = ClusterConfig(
        cluster_name=top.string("clusterName", pattern=CLUSTER_NAME_PATTERN,
                                accepted="3-20 lowercase letters, digits or '-', starting with a letter"),
        kubernetes_version=top.string("kubernetesVersion", pattern=KUBERNETES_VERSION_PATTERN,
                                      accepted="a release from 1.31.0 to 1.34.x, e.g. 1.33.4"),
        admin_ssh_public_key=top.string(
            "adminSshPublicKey", pattern=r"(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp\d+) [A-Za-z0-9+/=]+( .*)?",
            accepted="an OpenSSH public key line (ssh-ed25519 AAAA... comment)"),
        location=location,
        network=_network(top.section("network")),
        etcd=_etcd(top.section("etcd")),
        events_etcd=_etcd(top.section("eventsEtcd")),
        control_plane=_control_plane(top.section("controlPlane")),
        node_pools=top.items("nodePools", _node_pool, min_items=1),
        addons=_addons(top.section("addons", default={})),
        images=_images(top.section("images", default={})),
        machine_image_version=_machine_image_version(top),
    )
    top.done()
    _check_cross_field(config)
    return config


def _network(s: Section) -> NetworkConfig:
    hub_section = s.section("hub")
    hub = HubConfig(
        stack=hub_section.string("stack", default=None, pattern=STACK_REF_PATTERN,
                                 accepted="a stack reference <org>/<project>/<stack>"),
        address_space=hub_section.cidr("addressSpace", default=None),
    )
    hub_section.done()
    if (hub.stack is None) == (hub.address_space is None):
        raise ConfigError(hub_section.path, dict(hub_section.raw),
                          "exactly one of hub.stack (peer to an existing hub) or hub.addressSpace (create one)")
    nat = s.section("natHosts")
    nat_hosts = NatHostsConfig(count=nat.integer("count", minimum=1, maximum=16),
                               vm_size=_vm_size(nat, "vmSize", lambda size: size.has_local_disk))
    nat.done()
    network = NetworkConfig(
        address_space=s.cidr("addressSpace"),
        service_cidr=s.cidr("serviceCidr"),
        hub=hub,
        nat_hosts=nat_hosts,
        max_private_ips_per_vnet=s.integer("maxPrivateIpsPerVnet", DEFAULT_MAX_PRIVATE_IPS_PER_VNET,
                                           minimum=256),
        max_private_ips_per_peered_group=s.integer(
            "maxPrivateIpsPerPeeredGroup", DEFAULT_MAX_PRIVATE_IPS_PER_PEERED_GROUP, minimum=256),
    )
    s.done()
    if not network.address_space.is_private:
        raise ConfigError(s.key("addressSpace"), str(network.address_space),
                          "a private (RFC 1918) range such as 10.0.0.0/8")
    if network.address_space.prefixlen > 18:
        raise ConfigError(s.key("addressSpace"), str(network.address_space),
                          "a range of /18 or larger (each of its 64 blocks must hold the /24 of system subnets)")
    if network.service_cidr.overlaps(network.address_space):
        raise ConfigError(s.key("serviceCidr"), str(network.service_cidr),
                          f"a range outside network.addressSpace {network.address_space}")
    if not 12 <= network.service_cidr.prefixlen <= 24:
        raise ConfigError(s.key("serviceCidr"), str(network.service_cidr),
                          "a range from /12 to /24 (kube-apiserver refuses service ranges larger than /12)")
    if hub.address_space is not None:
        for other_key, other in (("addressSpace", network.address_space), ("serviceCidr", network.service_cidr)):
            if hub.address_space.overlaps(other):
                raise ConfigError(hub_section.key("addressSpace"), str(hub.address_space),
                                  f"a range that does not overlap network.{other_key} {other}")
    return network


def _etcd(s: Section) -> EtcdConfig:
    members = s.integer("members", minimum=1, maximum=7)
    if members % 2 == 0:
        raise ConfigError(s.key("members"), members,
                          "an odd number of members (1, 3, 5 or 7): an even count adds no fault tolerance")
    config = EtcdConfig(
        members=members,
        vm_size=_vm_size(s, "vmSize", lambda size: size.has_local_disk,
                         why="a size with a local temp or NVMe SSD (etcd must not run on a network disk)"),
        quota_backend_bytes=s.integer("quotaBackendBytes", minimum=MIN_ETCD_QUOTA_BYTES,
                                      maximum=MAX_ETCD_QUOTA_BYTES),
    )
    s.done()
    return config


def _control_plane(s: Section) -> ControlPlaneConfig:
    config = ControlPlaneConfig(
        apiservers=s.integer("apiservers", minimum=1, maximum=15),
        vm_size=_vm_size(s, "vmSize", lambda size: size.has_local_disk),
    )
    s.done()
    return config


def _node_pool(s: Section) -> NodePoolConfig:
    name = s.string("name", pattern=POOL_NAME_PATTERN,
                    accepted="1-12 lowercase letters or digits, starting with a letter "
                             "(it becomes part of Azure scale-set names)")
    role = s.choice("role", POOL_ROLES)
    if role == ROLE_GPU:
        vm_size = _vm_size(s, "vmSize", lambda size: size.gpus > 0 and size.has_local_disk,
                           why="a GPU size with a local SSD")
    else:
        vm_size = _vm_size(s, "vmSize", lambda size: size.gpus == 0 and size.has_local_disk,
                           why="a CPU size with a local SSD (containerd and kubelet state live there)")
    min_nodes = s.integer("minNodes", minimum=0)
    max_nodes = s.integer("maxNodes", minimum=1, maximum=50_000)
    if min_nodes > max_nodes:
        raise ConfigError(s.key("minNodes"), min_nodes, f"at most maxNodes ({max_nodes})")
    infiniband = s.boolean("infiniband", default=False)
    if infiniband and not VM_SIZES[vm_size].infiniband:
        raise ConfigError(s.key("infiniband"), True,
                          f"false for {vm_size}, or an InfiniBand size: {known_sizes(lambda z: z.infiniband)}")
    taints = s.items("taints", _taint, default=[])
    pool = NodePoolConfig(
        name=name, role=role, vm_size=vm_size, min_nodes=min_nodes, max_nodes=max_nodes,
        pod_ips_per_node=s.integer("podIpsPerNode", minimum=1, maximum=MAX_POD_IPS_PER_NODE),
        infiniband=infiniband,
        address_slot=s.integer("addressSlot", minimum=1, maximum=MAX_ADDRESS_SLOT),
        labels=s.string_map("labels", default={}, key_pattern=LABEL_KEY_PATTERN,
                            accepted="Kubernetes label keys and values (name: value, 63 characters at most)"),
        taints=taints,
        retired=s.boolean("retired", default=False),
    )
    for key, value in pool.labels.items():
        if not re.fullmatch(LABEL_VALUE_PATTERN, value):
            raise ConfigError(f"{s.key('labels')}.{key}", value, "a Kubernetes label value (63 characters at most)")
        if not kubelet_may_set_label(key):
            raise ConfigError(f"{s.key('labels')}.{key}", value,
                              "a label key outside the kubernetes.io and k8s.io namespaces, or under "
                              "node.kubernetes.io/ or kubelet.kubernetes.io/ (kubelet refuses to start with others)")
        if key in DERIVED_LABELS:
            raise ConfigError(f"{s.key('labels')}.{key}", value,
                              f"a label other than the ones every node derives from its pool ({', '.join(DERIVED_LABELS)})")
    s.done()
    return pool


def kubelet_may_set_label(key: str) -> bool:
    """Whether kubelet may set this label on its own node (NodeRestriction; k8s.io/kubelet
    pkg/apis/well_known_labels.go: the kubernetes.io/k8s.io namespaces are reserved except these)."""
    prefix = key.split("/", 1)[0] if "/" in key else ""
    reserved = any(prefix == ns or prefix.endswith("." + ns) for ns in ("kubernetes.io", "k8s.io"))
    return not reserved or prefix in ("node.kubernetes.io", "kubelet.kubernetes.io")


def _taint(s: Section) -> Taint:
    taint = Taint(
        key=s.string("key", pattern=LABEL_KEY_PATTERN, accepted="a Kubernetes taint key"),
        value=s.string("value", default="", pattern=LABEL_VALUE_PATTERN, allow_empty=True,
                       accepted="a taint value (63 characters at most)"),
        effect=s.choice("effect", TAINT_EFFECTS),
    )
    s.done()
    return taint


ADDON_KEYS = {
    "coredns": "coredns",
    "nodeLocalDns": "node_local_dns",
    "clusterAutoscaler": "cluster_autoscaler",
    "balloons": "balloons",
    "nvidiaDevicePlugin": "nvidia_device_plugin",
    "gpuHealthCheck": "gpu_health_check",
    "trafficAccounting": "traffic_accounting",
    "monitoring": "monitoring",
}


def _addons(s: Section) -> AddonsConfig:
    """Each add-on: ``{enabled: bool, ...settings}``; settings are validated by the add-on's builder."""
    toggles = {}
    for key, attr in ADDON_KEYS.items():
        section = s.section(key, default={})
        settings = {k: v for k, v in section.raw.items() if k != "enabled"}
        toggles[attr] = AddonToggle(enabled=section.boolean("enabled", default=True), settings=settings)
    s.done()
    return AddonsConfig(**toggles)


def _machine_image_version(top: Section) -> str:
    version = top.string("machineImageVersion", pattern=MACHINE_IMAGE_VERSION_PATTERN,
                         accepted=MACHINE_IMAGE_VERSION_ACCEPTED)
    if any(int(part) > 2**31 - 1 for part in version.split(".")):
        raise ConfigError(top.key("machineImageVersion"), version, MACHINE_IMAGE_VERSION_ACCEPTED)
    return version


def _images(s: Section) -> ImagesConfig:
    config = ImagesConfig(preload=s.string_list("preload", default=[]))
    for i, reference in enumerate(config.preload):
        if parse_image(reference) is None:
            raise ConfigError(f"{s.key('preload')}[{i}]", reference, IMAGE_ACCEPTED)
    s.done()
    return config


def _vm_size(s: Section, key: str, fits, why: str = "a size with a local temp or NVMe SSD") -> str:
    value = s.string(key)
    if value not in VM_SIZES:
        raise ConfigError(s.key(key), value, f"a known VM size: {known_sizes(fits)}")
    if not fits(VM_SIZES[value]):
        raise ConfigError(s.key(key), value, f"{why}: {known_sizes(fits)}")
    return value


def _check_cross_field(config: ClusterConfig) -> None:
    names = [pool.name for pool in config.node_pools]
    slots = [pool.address_slot for pool in config.node_pools]
    for i, pool in enumerate(config.node_pools):
        if pool.name in names[:i]:
            raise ConfigError(f"nodePools[{i}].name", pool.name, "a pool name not used by another pool")
        if pool.address_slot in slots[:i]:
            free = sorted(set(range(1, MAX_ADDRESS_SLOT + 1)) - set(slots))[:5]
            raise ConfigError(f"nodePools[{i}].addressSlot", pool.address_slot,
                              f"a slot no other pool uses, e.g. one of {free}")

