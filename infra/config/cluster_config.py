"""The config contract: raw stack config in, a validated ``ClusterConfig`` out.

``parse_config`` is the only way a config enters the program. It checks types,
ranges, unknown keys and the cross-field rules below, and raises ``ConfigError``
(one line: key, value, what is accepted) on the first problem, before any
resource is declared. Each key is declared once, where it is read (type, bounds,
default, description: see ``infra.config.schema``); docs/config-reference.md and
Pulumi.yaml's descriptions are generated from those reads.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from infra.catalog.image_refs import ACCEPTED as IMAGE_ACCEPTED
from infra.catalog.image_refs import parse_image
from infra.catalog.vm_sizes import VM_SIZES, VmSize, known_sizes
from infra.config import naming
from infra.config.errors import MISSING, NAMESPACE, ConfigError
from infra.config.schema import Section
from infra.config.value_checks import (
    SSH_KEY_ACCEPTED,
    check_kubernetes_version,
    check_location,
    check_private_range,
    check_ssh_public_key,
    kubernetes_releases_text,
)
from infra.facts.labels import (
    DERIVED_LABELS,
    POOL_ROLES,
    ROLE_GPU,
    ROLE_SYSTEM,
    SYSTEM_TAINT_EFFECT,
    SYSTEM_TAINT_KEY,
    SYSTEM_TAINT_VALUE,
)

# Azure: a private IP limit per VNet of 65,536 and 128,000 across a group of peered VNets
# (learn.microsoft.com azure-subscription-service-limits#networking-limits).
DEFAULT_MAX_PRIVATE_IPS_PER_VNET = 65_536
DEFAULT_MAX_PRIVATE_IPS_PER_PEERED_GROUP = 128_000
# Azure: at most 256 private IP addresses per NIC (same limits page); one is the node's own.
MAX_POD_IPS_PER_NODE = 255
# etcd's default backend quota is 2 GiB; the 2,500-node post hit it and the cluster stopped
# taking writes. etcd warns above 8 GiB ("suggested maximum", etcd v3.5 dev-guide/limit.md);
# the official 5,000-node scale test runs 20 GiB, which is our ceiling.
ETCD_DEFAULT_QUOTA_BYTES = 2 * 1024**3  # etcd's --quota-backend-bytes default (etcd v3.5 dev-guide/limit.md)
MIN_ETCD_QUOTA_BYTES = ETCD_DEFAULT_QUOTA_BYTES + 1  # strictly above it: the default is the outage value
MAX_ETCD_QUOTA_BYTES = 20 * 1024**3

# network.addressSpace is cut into 64 equal blocks: block 0 for the control plane, 1..63 for pools.
ADDRESS_BLOCKS = 64
MAX_ADDRESS_SLOT = ADDRESS_BLOCKS - 1
POOL_NAME_PATTERN = r"[a-z][a-z0-9]{0,11}"
CLUSTER_NAME_PATTERN = r"[a-z][a-z0-9-]{1,18}[a-z0-9]"
KUBERNETES_VERSION_PATTERN = r"1\.(3[1-4])\.(0|[1-9]\d?)"
# An Azure Compute Gallery image version: MAJOR.MINOR.PATCH, each within a 32-bit integer (Gallery Image
# Versions REST API, galleryImageVersionName: "digits must be within the range of a 32-bit integer").
MACHINE_IMAGE_VERSION_PATTERN = r"(0|[1-9]\d{0,9})\.(0|[1-9]\d{0,9})\.(0|[1-9]\d{0,9})"
MACHINE_IMAGE_VERSION_ACCEPTED = (
    "a Compute Gallery image version MAJOR.MINOR.PATCH, each part a whole number "
    'from 0 to 2147483647, quoted in YAML (e.g. "1.0.0")'
)
STACK_REF_PATTERN = r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+"
# Kubernetes label keys: optional DNS-subdomain prefix, then a name of at most 63 characters.
LABEL_KEY_PATTERN = r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
LABEL_VALUE_PATTERN = r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# A Microsoft Entra tenant or application (client) ID: a GUID, lowercase as the Microsoft Entra admin center and
# `az account show` print it and as Entra writes it into a token's `tid`, `aud` and issuer.
GUID_PATTERN = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
GUID_ACCEPTED = "a GUID in lowercase, such as 0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


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
    role: str  # "gpu" | "cpu" | "system"
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
    rdma_device_plugin: AddonToggle
    gpu_health_check: AddonToggle
    traffic_accounting: AddonToggle
    monitoring: AddonToggle


@dataclass(frozen=True)
class ImagesConfig:
    """Images every node holds before kubelet starts, so no public registry can stop a node."""

    preload: tuple[str, ...] = ()


@dataclass(frozen=True)
class PeopleSignInConfig:
    """People sign in to the API with Microsoft Entra ID: the tenant that issues their tokens and the
    application (client) ID the tokens are issued to (infra/control_plane/people_sign_in.py)."""

    tenant_id: str
    client_id: str


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
    # The gallery image version every machine boots (infra/assembly/machine_image.py, docs/node-image.md).
    machine_image_version: str = "1.0.0"
    # A cluster people depend on: its alerts must page someone (infra/addons/monitoring/__init__.py).
    production: bool = False
    # None: no token authenticator for people (a team's identity is then a client certificate only).
    people_sign_in: PeopleSignInConfig | None = None

    @property
    def max_nodes_total(self) -> int:
        return sum(pool.max_nodes for pool in self.node_pools if not pool.retired)

    def pool(self, name: str) -> NodePoolConfig:
        return next(p for p in self.node_pools if p.name == name)


# --------------------------------------------------------------------------- parsing

LOCATION_KEY = "azure-native:location"
# Config namespaces a stack may set: this project's and those of the providers the program uses
# (requirements.in); any other is a misspelling that Pulumi would pass on silently.
PROVIDER_NAMESPACES = ("azure-native", "kubernetes", "tls", "random", "pulumi")


def decode_cli_value(value: Any) -> Any:
    """A top-level config value as the program receives it: the CLI passes strings (objects and lists
    JSON-encoded, and a top-level `pulumi config set KEY VALUE` is always a string); JSON is decoded."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def check_config_keys(values: Mapping[str, Any]) -> None:
    """Refuses a key outside the known namespaces (``superclustr:clusterName``) like an unknown key."""
    for key, value in values.items():
        namespace = key.split(":", 1)[0] if ":" in key else ""
        if namespace != NAMESPACE and namespace not in PROVIDER_NAMESPACES:
            raise ConfigError(
                key, value, f"a known key (namespace {NAMESPACE}, or a provider's: {', '.join(PROVIDER_NAMESPACES)})"
            )


def parse_config(raw: Mapping[str, Any], location: Any) -> ClusterConfig:
    """Validate the ``supercluster:*`` keys (without the namespace) and the Azure location."""
    top = Section(raw, "")
    check_location(LOCATION_KEY, location)
    cluster_name = top.string(
        "clusterName",
        pattern=CLUSTER_NAME_PATTERN,
        accepted="3-20 lowercase letters, digits or '-', starting with a letter",
        description="the cluster's name; prefixes every Azure name",
    )
    kubernetes_version = top.string(
        "kubernetesVersion",
        accepted="a Kubernetes release the project pins: " + kubernetes_releases_text(),
        description="Kubernetes release of the control plane and every kubelet",
    )
    check_kubernetes_version(top.key("kubernetesVersion"), kubernetes_version)
    machine_image_version = _machine_image_version(top)
    admin_key = top.string(
        "adminSshPublicKey",
        accepted=SSH_KEY_ACCEPTED,
        description="OpenSSH public key of the break-glass admin user on every VM (SSH only "
        "from the hub); VMs created later and scale-set models take a new key, "
        "existing VMs need `az vm user update`",
    )
    check_ssh_public_key(top.key("adminSshPublicKey"), admin_key)
    config = ClusterConfig(
        cluster_name=cluster_name,
        kubernetes_version=kubernetes_version,
        admin_ssh_public_key=admin_key,
        location=location,
        network=_network(top.section("network", description="address space, service range, hub and NAT hosts")),
        etcd=_etcd(top.section("etcd", description="the main etcd cluster")),
        events_etcd=_etcd(
            top.section("eventsEtcd", description="the separate etcd cluster that stores only Kubernetes Events")
        ),
        control_plane=_control_plane(top.section("controlPlane", description="the dedicated apiserver VMs")),
        node_pools=top.items("nodePools", _node_pool, min_items=1, description="the node pools"),
        addons=_addons(top.section("addons", default={}, description="per add-on settings, each with enabled")),
        images=_images(top.section("images", default={}, description="images every node holds before kubelet starts")),
        machine_image_version=machine_image_version,
        production=top.boolean(
            "production",
            False,
            description="a cluster people depend on: monitoring must be enabled and name at least one receiver "
            "(addons.monitoring.receivers), so its alerts page someone",
        ),
        people_sign_in=_people_sign_in(
            top.section(
                "peopleSignIn",
                default={},
                description="people sign in to the API with Microsoft Entra ID (the apiservers' jwt "
                "authenticator); both tenantId and clientId, or neither (no token authenticator for people)",
            )
        ),
    )
    top.done()
    _check_cross_field(config)
    naming.check_derived_names(config.cluster_name, [pool.name for pool in config.node_pools])
    return config


def _network(s: Section) -> NetworkConfig:
    hub_section = s.section(
        "hub",
        description="the researchers' hub: peer to another team's (stack) or create "
        "one here (addressSpace); exactly one of the two",
    )
    hub = HubConfig(
        stack=hub_section.string(
            "stack",
            default=None,
            pattern=STACK_REF_PATTERN,
            accepted="a stack reference <org>/<project>/<stack>",
            description="org/project/stack of a hub owned by another team, read by StackReference and peered to",
        ),
        address_space=hub_section.cidr(
            "addressSpace",
            default=None,
            description="create the hub here instead; /26 or larger, counted in the peered group's private IPs",
        ),
    )
    hub_section.done()
    if (hub.stack is None) == (hub.address_space is None):
        raise ConfigError(
            hub_section.path,
            dict(hub_section.raw),
            "exactly one of hub.stack (peer to an existing hub) or hub.addressSpace (create one)",
        )
    if hub.address_space is not None:
        check_private_range(hub_section.key("addressSpace"), hub.address_space)
    nat = s.section(
        "natHosts", description="the NAT hosts that translate the service range for traffic from outside the cluster"
    )
    nat_hosts = NatHostsConfig(
        count=nat.integer("count", minimum=1, maximum=16, description="how many NAT hosts"),
        vm_size=_vm_size(nat, "vmSize", lambda size: size.has_local_disk, description="the NAT hosts' VM size"),
    )
    nat.done()
    network = NetworkConfig(
        address_space=s.cidr(
            "addressSpace",
            description="the range every cluster VNet is carved from: 64 blocks, "
            "block 0 the system VNet, block addressSlot a pool's",
        ),
        service_cidr=s.cidr(
            "serviceCidr", description="the Kubernetes service range; reachable from the hub through the NAT hosts"
        ),
        hub=hub,
        nat_hosts=nat_hosts,
        max_private_ips_per_vnet=s.integer(
            "maxPrivateIpsPerVnet",
            DEFAULT_MAX_PRIVATE_IPS_PER_VNET,
            minimum=256,
            description="Azure's private-IP limit per VNet",
        ),
        max_private_ips_per_peered_group=s.integer(
            "maxPrivateIpsPerPeeredGroup",
            DEFAULT_MAX_PRIVATE_IPS_PER_PEERED_GROUP,
            minimum=256,
            description="Azure's private-IP limit across a group of peered VNets",
        ),
    )
    s.done()
    check_private_range(s.key("addressSpace"), network.address_space)
    if network.address_space.prefixlen > 18:
        raise ConfigError(
            s.key("addressSpace"),
            str(network.address_space),
            "a range of /18 or larger (each of its 64 blocks must hold the /24 of system subnets)",
        )
    check_private_range(s.key("serviceCidr"), network.service_cidr)
    if network.service_cidr.overlaps(network.address_space):
        raise ConfigError(
            s.key("serviceCidr"),
            str(network.service_cidr),
            f"a range outside network.addressSpace {network.address_space}",
        )
    if not 12 <= network.service_cidr.prefixlen <= 24:
        raise ConfigError(
            s.key("serviceCidr"),
            str(network.service_cidr),
            "a range from /12 to /24 (kube-apiserver refuses service ranges larger than /12)",
        )
    if hub.address_space is not None:
        for other_key, other in (("addressSpace", network.address_space), ("serviceCidr", network.service_cidr)):
            if hub.address_space.overlaps(other):
                raise ConfigError(
                    hub_section.key("addressSpace"),
                    str(hub.address_space),
                    f"a range that does not overlap network.{other_key} {other}",
                )
    return network


def _etcd(s: Section) -> EtcdConfig:
    # Odd counts, and even ones only as a one-member step: infra/etcd/membership_change.py (it needs the last deploy).
    members = s.integer(
        "members",
        minimum=1,
        maximum=7,
        description="members, an odd number (an even one only as the one-member step between two odd ones)",
    )
    config = EtcdConfig(
        members=members,
        vm_size=_vm_size(
            s,
            "vmSize",
            lambda size: size.has_local_disk,
            why="a size with a local temp or NVMe SSD (etcd must not run on a network disk)",
            description="the members' VM size, with a local SSD (etcd never runs on a network disk)",
        ),
        quota_backend_bytes=s.integer(
            "quotaBackendBytes",
            minimum=MIN_ETCD_QUOTA_BYTES,
            maximum=MAX_ETCD_QUOTA_BYTES,
            description="the backend quota (the default 2 GiB stopped OpenAI's cluster)",
        ),
    )
    s.done()
    return config


def _control_plane(s: Section) -> ControlPlaneConfig:
    config = ControlPlaneConfig(
        apiservers=s.integer("apiservers", minimum=1, maximum=15, description="dedicated apiserver VMs"),
        vm_size=_vm_size(s, "vmSize", lambda size: size.has_local_disk, description="the apiservers' VM size"),
    )
    s.done()
    return config


def _node_pool(s: Section) -> NodePoolConfig:
    name = s.string(
        "name",
        pattern=POOL_NAME_PATTERN,
        accepted="1-12 lowercase letters or digits, starting with a letter (it becomes part of Azure scale-set names)",
        description="the pool's name",
    )
    role = s.choice(
        "role",
        POOL_ROLES,
        description="gpu pools need a GPU size, cpu and system pools a CPU size; system pools are tainted for "
        "the add-ons that hold cloud identities or watch the whole cluster (the autoscaler, monitoring)",
    )
    if role == ROLE_GPU:
        vm_size = _vm_size(
            s,
            "vmSize",
            lambda size: size.gpus > 0 and size.has_local_disk,
            why="a GPU size with a local SSD",
            description=POOL_VM_SIZE_DESCRIPTION,
        )
    else:
        vm_size = _vm_size(
            s,
            "vmSize",
            lambda size: size.gpus == 0 and size.has_local_disk,
            why="a CPU size with a local SSD (containerd and kubelet state live there)",
            description=POOL_VM_SIZE_DESCRIPTION,
        )
    min_nodes = s.integer("minNodes", minimum=0, description="the autoscaler's lower bound")
    max_nodes = s.integer("maxNodes", minimum=1, maximum=50_000, description="the autoscaler's upper bound")
    if min_nodes > max_nodes:
        raise ConfigError(s.key("minNodes"), min_nodes, f"at most maxNodes ({max_nodes})")
    infiniband = s.boolean(
        "infiniband", default=False, description="InfiniBand pool: needs an InfiniBand size; caps scale sets at 100 VMs"
    )
    if infiniband and not VM_SIZES[vm_size].infiniband:
        raise ConfigError(
            s.key("infiniband"),
            True,
            f"false for {vm_size}, or an InfiniBand size: {known_sizes(lambda z: z.infiniband)}",
        )
    taints = s.items("taints", _taint, default=[], description="node taints")
    for j, taint in enumerate(taints):
        if taint.key == SYSTEM_TAINT_KEY:
            raise ConfigError(f"{s.key('taints')}[{j}].key", taint.key, "a taint other than the system pools' own")
    if role == ROLE_SYSTEM:
        # Derived, never configured: what keeps tenants (who may not tolerate it) off the system pools.
        taints = (*taints, Taint(SYSTEM_TAINT_KEY, SYSTEM_TAINT_VALUE, SYSTEM_TAINT_EFFECT))
    pool = NodePoolConfig(
        name=name,
        role=role,
        vm_size=vm_size,
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        pod_ips_per_node=s.integer(
            "podIpsPerNode",
            minimum=1,
            maximum=MAX_POD_IPS_PER_NODE,
            description="secondary IP configurations per NIC, i.e. pod IPs per node, and "
            "kubelet's maxPods; sizes the pool's subnets, so fixed once the "
            "pool exists",
        ),
        infiniband=infiniband,
        address_slot=s.integer(
            "addressSlot",
            minimum=1,
            maximum=MAX_ADDRESS_SLOT,
            description="the pool's fixed block of network.addressSpace; never change or reuse it",
        ),
        labels=s.string_map(
            "labels",
            default={},
            key_pattern=LABEL_KEY_PATTERN,
            accepted="Kubernetes label keys and values (name: value, 63 characters at most)",
            description="node labels, each also a scale-set tag",
        ),
        taints=taints,
        retired=s.boolean(
            "retired",
            default=False,
            description="no new nodes (autoscaler max 0): the first of the two deploys that remove a pool",
        ),
    )
    for key, value in pool.labels.items():
        if not (value.isascii() and re.fullmatch(LABEL_VALUE_PATTERN, value)):
            raise ConfigError(f"{s.key('labels')}.{key}", value, "a Kubernetes label value (63 characters at most)")
        if not kubelet_may_set_label(key):
            raise ConfigError(
                f"{s.key('labels')}.{key}",
                value,
                "a label key outside the kubernetes.io and k8s.io namespaces, or under "
                "node.kubernetes.io/ or kubelet.kubernetes.io/ (kubelet refuses to start with others)",
            )
        if key in DERIVED_LABELS:
            raise ConfigError(
                f"{s.key('labels')}.{key}",
                value,
                f"a label other than the ones every node derives from its pool ({', '.join(DERIVED_LABELS)})",
            )
    s.done()
    return pool


POOL_VM_SIZE_DESCRIPTION = "the nodes' VM size, with a local SSD (containerd and kubelet state live there)"


def kubelet_may_set_label(key: str) -> bool:
    """Whether kubelet may set this label on its own node (NodeRestriction; k8s.io/kubelet
    pkg/apis/well_known_labels.go: the kubernetes.io/k8s.io namespaces are reserved except these)."""
    prefix = key.split("/", 1)[0] if "/" in key else ""
    reserved = any(prefix == ns or prefix.endswith("." + ns) for ns in ("kubernetes.io", "k8s.io"))
    return not reserved or prefix in ("node.kubernetes.io", "kubelet.kubernetes.io")


def _taint(s: Section) -> Taint:
    taint = Taint(
        key=s.string("key", pattern=LABEL_KEY_PATTERN, accepted="a Kubernetes taint key", description="taint key"),
        value=s.string(
            "value",
            default="",
            pattern=LABEL_VALUE_PATTERN,
            allow_empty=True,
            accepted="a taint value (63 characters at most)",
            description="taint value",
        ),
        effect=s.choice("effect", TAINT_EFFECTS, description="taint effect"),
    )
    s.done()
    return taint


ADDON_KEYS = {
    "coredns": "coredns",
    "nodeLocalDns": "node_local_dns",
    "clusterAutoscaler": "cluster_autoscaler",
    "balloons": "balloons",
    "nvidiaDevicePlugin": "nvidia_device_plugin",
    "rdmaDevicePlugin": "rdma_device_plugin",
    "gpuHealthCheck": "gpu_health_check",
    "trafficAccounting": "traffic_accounting",
    "monitoring": "monitoring",
}


def _addons(s: Section) -> AddonsConfig:
    """Each add-on: ``{enabled: bool, ...settings}``; settings are validated by the add-on's builder."""
    toggles = {}
    for key, attr in ADDON_KEYS.items():
        section = s.section(key, default={}, description=f"the {key} add-on: enabled and its settings")
        settings = {k: v for k, v in section.raw.items() if k != "enabled"}
        toggles[attr] = AddonToggle(
            enabled=section.boolean("enabled", default=True, description=f"whether the {key} add-on is applied"),
            settings=settings,
        )
    s.done()
    return AddonsConfig(**toggles)


def _people_sign_in(s: Section) -> PeopleSignInConfig | None:
    # Both read with no default, so the reference lists both; ``None`` when not set.
    tenant_id: str | None = s.string(
        "tenantId",
        default=None,
        pattern=GUID_PATTERN,
        accepted=GUID_ACCEPTED + " (the tenant ID, never a domain name: Entra's issuer names the GUID)",
        description="the Microsoft Entra tenant (directory) ID whose v2.0 issuer signs people's tokens",
    )
    client_id: str | None = s.string(
        "clientId",
        default=None,
        pattern=GUID_PATTERN,
        accepted=GUID_ACCEPTED,
        description="the application (client) ID of the app registration people sign in with: the tokens' audience",
    )
    s.done()
    if tenant_id is None and client_id is None:
        return None
    if tenant_id is None or client_id is None:
        missing = "tenantId" if tenant_id is None else "clientId"
        raise ConfigError(s.key(missing), MISSING, "a value: peopleSignIn needs both tenantId and clientId")
    return PeopleSignInConfig(tenant_id=tenant_id, client_id=client_id)


def _machine_image_version(top: Section) -> str:
    version = top.string(
        "machineImageVersion",
        pattern=MACHINE_IMAGE_VERSION_PATTERN,
        accepted=MACHINE_IMAGE_VERSION_ACCEPTED,
        description="the Compute Gallery machine image version every VM and scale set boots; a "
        "new one whenever what the image carries changes, rolled out in stages "
        "(docs/node-image.md)",
    )
    if any(int(part) > 2**31 - 1 for part in version.split(".")):
        raise ConfigError(top.key("machineImageVersion"), version, MACHINE_IMAGE_VERSION_ACCEPTED)
    return version


def _images(s: Section) -> ImagesConfig:
    config = ImagesConfig(
        preload=s.string_list(
            "preload",
            default=[],
            accepted="a list, each item " + IMAGE_ACCEPTED,
            description="images preloaded and pinned on every node before kubelet starts",
        )
    )
    for i, reference in enumerate(config.preload):
        if parse_image(reference) is None:
            raise ConfigError(f"{s.key('preload')}[{i}]", reference, IMAGE_ACCEPTED)
    s.done()
    return config


def _vm_size(
    s: Section,
    key: str,
    fits: Callable[[VmSize], bool],
    why: str = "a size with a local temp or NVMe SSD",
    description: str = "",
) -> str:
    value = s.string(key, accepted=f"{why}: {known_sizes(fits)}", description=description)
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
            raise ConfigError(
                f"nodePools[{i}].addressSlot", pool.address_slot, f"a slot no other pool uses, e.g. one of {free}"
            )
    # The autoscaler's identity and monitoring live only on system pools (docs/security.md, "An add-on").
    needs_system = [
        key for key in ("clusterAutoscaler", "monitoring") if getattr(config.addons, ADDON_KEYS[key]).enabled
    ]
    if needs_system and not any(pool.role == ROLE_SYSTEM and not pool.retired for pool in config.node_pools):
        raise ConfigError(
            "nodePools",
            names,
            f"a pool with role {ROLE_SYSTEM} (not retired): the enabled add-ons "
            f"{', '.join(needs_system)} run only there",
        )
