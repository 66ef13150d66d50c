"""Every Azure name the program derives, one rule each, so no name is improvised inline.

Pulumi logical names are the component's name plus a stable suffix; the Azure
(physical) names below are what users see in the portal and what must stay
stable across deploys. Each is checked against Azure's naming rule for its resource
type (``NAME_RULES``, ``check_derived_names``) when the config is validated, so a
cluster name Azure would refuse stops the program before any resource is declared.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from infra.catalog.image_refs import CACHE_PREFIXES
from infra.config.errors import ConfigError
from infra.facts import roles


def resource_group(cluster: str) -> str:
    return f"{cluster}-rg"


def node_resource_group(cluster: str) -> str:
    """The node pools' scale sets, alone (as AKS keeps its node resource group): the only group the
    cluster autoscaler's identity may change (docs/security.md, "A node")."""
    return f"{cluster}-nodes-rg"


def vnet(cluster: str, vnet_key: str) -> str:
    """A cluster VNet: ``system`` or a node pool's name."""
    return f"{cluster}-{vnet_key}-vnet"


def apiserver(cluster: str, index: int) -> str:
    """An apiserver VM (and its hostname), e.g. ``prod-apiserver-0``."""
    return f"{cluster}-apiserver-{index}"


def apiserver_scale_set(cluster: str) -> str:
    """The apiservers' scale set (infra/control_plane/scale_set.py), e.g. ``prod-apiservers``."""
    return f"{cluster}-apiservers"


def apiserver_computer_name_prefix(cluster: str) -> str:
    """Its instances' host names, e.g. ``prod-apiserver000000`` (never an individual VM's ``prod-apiserver-0``)."""
    return f"{cluster}-apiserver"


def apiserver_load_balancer(cluster: str) -> str:
    return f"{cluster}-apiserver-lb"


def etcd_member(cluster_role: str, index: int) -> str:
    """An etcd VM, e.g. ``prod-etcd-0`` or ``prod-events-etcd-2``; also its etcd member name."""
    return f"{cluster_role}-{index}"


def role_identity(cluster: str, role: str) -> str:
    """The user-assigned managed identity of a machine role (etcd, apiserver, node, nat, autoscaler)."""
    return f"{cluster}-id-{role}"


def role_identity_below_subscription(cluster: str, role: str) -> str:
    """The role identity's resource ID without its subscription, as a machine names it to IMDS
    (``machine/shared/imds_token.py``): declared in the cluster's resource group, whichever group the machine is in."""
    return (
        f"/resourceGroups/{resource_group(cluster)}/providers/Microsoft.ManagedIdentity/userAssignedIdentities/"
        f"{role_identity(cluster, role)}"
    )


def node_scale_set_prefix(cluster: str) -> str:
    """What every node pool's scale-set name starts with; the rest is the shard's name, which is also its
    instances' computer-name prefix (``computer_name_prefix``). The node certificates' approver recognises the
    cluster's scale sets by it, so adding a pool changes nothing on the apiservers."""
    return f"{cluster}-"


def scale_set(cluster: str, shard_name: str) -> str:
    return node_scale_set_prefix(cluster) + shard_name


# The etcd backup account's purpose (storage_account keeps its first 6 characters).
ETCD_BACKUP_STORAGE_PURPOSE = "etcdbk"


def _global_suffix(cluster: str, salt: str) -> str:
    """6 hex characters that make a globally unique Azure name stable for one cluster."""
    return hashlib.sha256(f"{cluster}/{salt}".encode()).hexdigest()[:6]


def key_vault(cluster: str) -> str:
    """Key Vault names are global, 3-24 characters (``NAME_RULES["key vault"]``). A hyphen the truncation leaves at
    the end of the cluster's part is dropped: it would meet the ``-kv-`` hyphen."""
    return f"{cluster[:14].rstrip('-')}-kv-{_global_suffix(cluster, 'kv')}"


def storage_account(cluster: str, purpose: str) -> str:
    """Storage account names are global, 3-24 lowercase letters and digits."""
    base = "".join(ch for ch in cluster if ch.isalnum())[:12]
    return f"{base}{purpose[:6]}{_global_suffix(cluster, purpose)}"


def container_registry(cluster: str) -> str:
    """Container registry names are global, 5-50 letters and digits."""
    base = "".join(ch for ch in cluster if ch.isalnum())[:20]
    return f"{base}acr{_global_suffix(cluster, 'acr')}"


def cache_rule(prefix: str) -> str:
    """An artifact-cache rule of the registry, named after the repository prefix it fills (``k8s-cache``
    for ``k8s/*``): a rule name is 5-50 characters, so the bare prefix (``k8s``) is too short."""
    return f"{prefix}-cache"


# Azure names a scale set's VM ``<computerNamePrefix>`` plus six characters (the name rules below: a Linux host
# name is at most 64 characters and the prefix at most 58). It is also the node's name: kubelet registers under
# the host name, and the node-labels policy (infra/control_plane/admission.py) reads the pool from it.
COMPUTER_NAME_SUFFIX_CHARS = 6


def computer_name_prefix(shard_name: str) -> str:
    """The host name prefix of a scale set's VMs (Azure appends ``COMPUTER_NAME_SUFFIX_CHARS`` per instance)."""
    return shard_name


def container_registry_login_server(cluster: str) -> str:
    """Known before deployment, so it can go into cloud-init as plain text (public Azure's suffix)."""
    return f"{container_registry(cluster)}.azurecr.io"


# --------------------------------------------------------------------------- network


def network_security_group(cluster: str, group_key: str) -> str:
    return f"{cluster}-{group_key}-nsg"


def nat_gateway(cluster: str, vnet_key: str) -> str:
    return f"{cluster}-{vnet_key}-natgw"


def egress_prefix(cluster: str, vnet_key: str) -> str:
    """The public IP prefix a VNet's NAT gateway sends from (the cluster's egress addresses)."""
    return f"{cluster}-{vnet_key}-egress"


def route_table(cluster: str, vnet_key: str) -> str:
    return f"{cluster}-{vnet_key}-rt"


def hub_peering(cluster: str, vnet_key: str) -> str:
    """A peering in the hub VNet, which many clusters peer to: named after the cluster and its VNet."""
    return f"{cluster}-{vnet_key}"


def service_route(cluster: str) -> str:
    """The hub route that sends a cluster's service range to its NAT hosts."""
    return f"{cluster}-services"


def nat_load_balancer(cluster: str) -> str:
    return f"{cluster}-nat-lb"


def nat_host_prefix(cluster: str) -> str:
    """What every NAT host's VM name starts with (the node certificates' approver recognises them by it)."""
    return f"{cluster}-nat-"


def nat_host(cluster: str, index: int) -> str:
    return f"{nat_host_prefix(cluster)}{index}"


# --------------------------------------------------------------------------- machine images

# The machine image kinds (infra/assembly/machine_image.py KINDS, which reads them from here).
IMAGE_KINDS = ("cpu", "gpu")


def compute_gallery(cluster: str) -> str:
    """Compute Gallery names take letters, digits and '.' only, no '-' or '_' (NAME_RULES["compute gallery"]),
    e.g. ``prod.images``."""
    return cluster.replace("-", ".") + ".images"


def gallery_image(cluster: str, kind: str) -> str:
    """An image definition of the cluster's gallery, e.g. ``prod-cpu`` (infra/assembly/machine_image.py KINDS)."""
    return f"{cluster}-{kind}"


def image_template(cluster: str, kind: str, version: str) -> str:
    """The Image Builder template that builds one version of one image, e.g. ``prod-gpu-1.2.0``."""
    return f"{cluster}-{kind}-{version}"


# --------------------------------------------------------------------------- Azure's naming rules

NAME_RULES_PAGE = "https://learn.microsoft.com/azure/azure-resource-manager/management/resource-name-rules"


@dataclass(frozen=True)
class NameRule:
    """Azure's rule for one resource type's name: its length, the characters it takes (``pattern``,
    matched whole) and where the rule is documented."""

    entity: str
    min_length: int
    max_length: int
    pattern: str
    accepted: str
    source: str

    def problem(self, name: str) -> str | None:
        """Why Azure would refuse ``name``, or None."""
        if not self.min_length <= len(name) <= self.max_length:
            return f"{name!r} is {len(name)} characters, {self.entity} takes {self.min_length}-{self.max_length}"
        if not re.fullmatch(self.pattern, name):
            return f"{name!r} is not {self.accepted} ({self.entity})"
        return None


_NETWORK_CHARS = "letters, digits, '_', '.' and '-', starting with a letter or digit, ending with one or '_'"
_NETWORK_PATTERN = r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?"
# A host name: none of \ / " ' [ ] : | < > + = ; , ? * @ & and no space; not starting with '_', not ending
# with '.' or '-' (the virtualMachines and virtualMachineScaleSets rows: the rule is the host name's).
_HOST_PATTERN = r"(?!_)[^\\/\"'\[\]:|<>+=;,?*@&\s]*[^\\/\"'\[\]:|<>+=;,?*@&\s.-]"
_HOST_CHARS = "a host name: no \\/\"'[]:|<>+=;,?*@& or space, not starting with '_', not ending with '.' or '-'"

# Each from the naming rules page (NAME_RULES_PAGE), the row of its resource type, except the cache
# rule's, which that page does not list: its limits are the cacheRuleName parameter's in the
# Microsoft.ContainerRegistry REST API (the same in azure-mgmt-containerregistry's request builder).
NAME_RULES: dict[str, NameRule] = {
    "resource group": NameRule(
        "Microsoft.Resources/resourceGroups",
        1,
        90,
        r"[\w().-]*[\w()-]",
        "letters, digits, '_', '(', ')', '-' and '.', not ending with '.'",
        f"{NAME_RULES_PAGE}#microsoftresources",
    ),
    "key vault": NameRule(
        "Microsoft.KeyVault/vaults",
        3,
        24,
        r"[A-Za-z](?!.*--)[A-Za-z0-9-]*[A-Za-z0-9]",
        "letters, digits and '-', starting with a letter, ending with a letter or digit, no consecutive hyphens",
        f"{NAME_RULES_PAGE}#microsoftkeyvault",
    ),
    "storage account": NameRule(
        "Microsoft.Storage/storageAccounts",
        3,
        24,
        r"[a-z0-9]+",
        "lowercase letters and digits",
        f"{NAME_RULES_PAGE}#microsoftstorage",
    ),
    "container registry": NameRule(
        "Microsoft.ContainerRegistry/registries",
        5,
        50,
        r"[A-Za-z0-9]+",
        "letters and digits",
        f"{NAME_RULES_PAGE}#microsoftcontainerregistry",
    ),
    "registry cache rule": NameRule(
        "Microsoft.ContainerRegistry/registries/cacheRules",
        5,
        50,
        r"[A-Za-z0-9-]+",
        "letters, digits and '-'",
        "https://learn.microsoft.com/rest/api/containerregistry/cache-rules/create",
    ),
    "key vault secret": NameRule(
        "Microsoft.KeyVault/vaults/secrets",
        1,
        127,
        r"[A-Za-z0-9-]+",
        "letters, digits and '-'",
        f"{NAME_RULES_PAGE}#microsoftkeyvault",
    ),
    "blob container": NameRule(
        "Microsoft.Storage/storageAccounts/blobServices/containers",
        3,
        63,
        r"[a-z0-9](?!.*--)[a-z0-9-]*",
        "lowercase letters, digits and '-', starting with a letter or digit, no consecutive hyphens",
        f"{NAME_RULES_PAGE}#microsoftstorage",
    ),
    "managed identity": NameRule(
        "Microsoft.ManagedIdentity/userAssignedIdentities",
        3,
        128,
        r"[A-Za-z0-9][A-Za-z0-9_-]*",
        "letters, digits, '-' and '_', starting with a letter or digit",
        f"{NAME_RULES_PAGE}#microsoftmanagedidentity",
    ),
    "virtual network": NameRule(
        "Microsoft.Network/virtualNetworks",
        2,
        64,
        _NETWORK_PATTERN,
        _NETWORK_CHARS,
        f"{NAME_RULES_PAGE}#microsoftnetwork",
    ),
    "network resource": NameRule(
        "Microsoft.Network (load balancers, NICs, NSGs, NAT gateways, public IP "
        "prefixes, route tables, routes, peerings, subnets, private DNS zone links)",
        1,
        80,
        _NETWORK_PATTERN,
        _NETWORK_CHARS,
        f"{NAME_RULES_PAGE}#microsoftnetwork",
    ),
    "virtual machine": NameRule(
        "Microsoft.Compute/virtualMachines (Linux)",
        1,
        64,
        _HOST_PATTERN,
        _HOST_CHARS,
        f"{NAME_RULES_PAGE}#microsoftcompute",
    ),
    "scale set": NameRule(
        "Microsoft.Compute/virtualMachineScaleSets (Linux)",
        1,
        64,
        _HOST_PATTERN,
        _HOST_CHARS,
        f"{NAME_RULES_PAGE}#microsoftcompute",
    ),
    # A Linux host name is 1-64 characters; a scale set's instances are named prefix + COMPUTER_NAME_SUFFIX_CHARS.
    "computer name prefix": NameRule(
        "Microsoft.Compute/virtualMachineScaleSets computerNamePrefix (Linux)",
        1,
        58,
        _HOST_PATTERN,
        _HOST_CHARS,
        f"{NAME_RULES_PAGE}#microsoftcompute",
    ),
    # The page's galleries row: alphanumerics and periods (some revisions also list '_'; the stricter one).
    "compute gallery": NameRule(
        "Microsoft.Compute/galleries",
        1,
        80,
        r"[A-Za-z0-9](?:[A-Za-z0-9.]*[A-Za-z0-9])?",
        "letters, digits and '.', starting and ending with a letter or digit",
        f"{NAME_RULES_PAGE}#microsoftcompute",
    ),
    # The galleries / images row: alphanumerics, hyphens and periods (some revisions also list '_').
    "gallery image": NameRule(
        "Microsoft.Compute/galleries/images",
        1,
        80,
        r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?",
        "letters, digits, '-' and '.', starting and ending with a letter or digit",
        f"{NAME_RULES_PAGE}#microsoftcompute",
    ),
    # Not on the naming rules page: the imageTemplateName parameter's pattern, ^[A-Za-z0-9-_.]{1,64}$, in the
    # Microsoft.VirtualMachineImages REST API.
    "image template": NameRule(
        "Microsoft.VirtualMachineImages/imageTemplates",
        1,
        64,
        r"[A-Za-z0-9_.-]+",
        "letters, digits, '-', '_' and '.'",
        "https://learn.microsoft.com/rest/api/imagebuilder/virtual-machine-image-templates/create-or-update",
    ),
}

# The role identities the program creates (components/identities.py declares one per role; Image Builder's,
# "image-builder", is components/machine_images.py's).
IDENTITY_ROLES = (*roles.IDENTITIES, "image-builder")
# The longest forms each derived name takes: the highest member, apiserver and NAT host indexes config
# allows, the last shard a pool can have (three digits), a pool's further VNets (one per /16 of its block).
_WIDEST = {"etcd": 6, "apiserver": 14, "nat": 15, "vnet": 9}
_WIDEST_SHARD = "s999"
# The longest machineImageVersion config allows (each part at most 2147483647).
_WIDEST_IMAGE_VERSION = "2147483647.2147483647.2147483647"


def derived_names(cluster: str, pools: Iterable[str]) -> list[tuple[str, str, str]]:
    """``(the config key it derives from, the name, its rule's key in NAME_RULES)`` for every Azure name
    the program derives from the cluster's and the pools' names, in their longest forms."""
    c = "clusterName"
    names = [
        (c, resource_group(cluster), "resource group"),
        (c, node_resource_group(cluster), "resource group"),
        (c, key_vault(cluster), "key vault"),
        (c, storage_account(cluster, ETCD_BACKUP_STORAGE_PURPOSE), "storage account"),
        (c, container_registry(cluster), "container registry"),
        (c, apiserver(cluster, _WIDEST["apiserver"]), "virtual machine"),
        (c, nat_host(cluster, _WIDEST["nat"]), "virtual machine"),
        (c, etcd_member(f"{cluster}-events-etcd", _WIDEST["etcd"]), "virtual machine"),
        (c, apiserver_scale_set(cluster), "scale set"),
        (c, apiserver_computer_name_prefix(cluster), "computer name prefix"),
        (c, apiserver_load_balancer(cluster), "network resource"),
        (c, nat_load_balancer(cluster), "network resource"),
        (c, service_route(cluster), "network resource"),
    ]
    names += [(c, role_identity(cluster, role), "managed identity") for role in IDENTITY_ROLES]
    names += [(c, cache_rule(prefix), "registry cache rule") for prefix in sorted(CACHE_PREFIXES.values())]
    names += [(c, compute_gallery(cluster), "compute gallery")]
    names += [(c, gallery_image(cluster, kind), "gallery image") for kind in IMAGE_KINDS]
    names += [(c, image_template(cluster, kind, _WIDEST_IMAGE_VERSION), "image template") for kind in IMAGE_KINDS]
    vnet_keys = [(c, "system"), (c, "hub")]
    for i, pool in enumerate(pools):
        key = f"nodePools[{i}].name"
        vnet_keys += [(key, pool), (key, f"{pool}-{_WIDEST['vnet']}")]
        shard = f"{pool}-{_WIDEST_SHARD}"
        names += [
            (key, scale_set(cluster, shard), "scale set"),
            (key, computer_name_prefix(shard), "computer name prefix"),
        ]
    for key, vnet_key in vnet_keys:
        names += [(key, vnet(cluster, vnet_key), "virtual network")]
        names += [
            (key, make(cluster, vnet_key), "network resource")
            for make in (network_security_group, nat_gateway, egress_prefix, route_table, hub_peering)
        ]
    return names


def check_derived_names(cluster: str, pools: Iterable[str]) -> None:
    """Stops with one line naming the config key whose value gives a name Azure would refuse."""
    pools = list(pools)
    for key, name, rule_key in derived_names(cluster, pools):
        rule = NAME_RULES[rule_key]
        problem = rule.problem(name)
        if problem:
            value = cluster if key == "clusterName" else pools[int(key.split("[")[1].split("]")[0])]
            raise ConfigError(
                key,
                value,
                f"a name from which every Azure name derives validly; the {rule_key} name {problem}; see {rule.source}",
            )
