"""Every Azure name the program derives, one rule each, so no name is improvised inline.

Pulumi logical names are the component's name plus a stable suffix; the Azure
(physical) names below are what users see in the portal and what must stay
stable across deploys.
"""

from __future__ import annotations

import hashlib


def resource_group(cluster: str) -> str:
    return f"{cluster}-rg"


def vnet(cluster: str, vnet_key: str) -> str:
    """A cluster VNet: ``system`` or a node pool's name."""
    return f"{cluster}-{vnet_key}-vnet"


def apiserver(cluster: str, index: int) -> str:
    """An apiserver VM (and its hostname), e.g. ``prod-apiserver-0``."""
    return f"{cluster}-apiserver-{index}"


def apiserver_load_balancer(cluster: str) -> str:
    return f"{cluster}-apiserver-lb"


def etcd_member(cluster_role: str, index: int) -> str:
    """An etcd VM, e.g. ``prod-etcd-0`` or ``prod-events-etcd-2``; also its etcd member name."""
    return f"{cluster_role}-{index}"


def role_identity(cluster: str, role: str) -> str:
    """The user-assigned managed identity of a machine role (etcd, apiserver, node, nat, autoscaler)."""
    return f"{cluster}-id-{role}"


def scale_set(cluster: str, shard_name: str) -> str:
    return f"{cluster}-{shard_name}"


def _global_suffix(cluster: str, salt: str) -> str:
    """6 hex characters that make a globally unique Azure name stable for one cluster."""
    return hashlib.sha256(f"{cluster}/{salt}".encode()).hexdigest()[:6]


def key_vault(cluster: str) -> str:
    """Key Vault names are global, 3-24 characters of letters, digits and '-'."""
    return f"{cluster[:14]}-kv-{_global_suffix(cluster, 'kv')}"


def storage_account(cluster: str, purpose: str) -> str:
    """Storage account names are global, 3-24 lowercase letters and digits."""
    base = "".join(ch for ch in cluster if ch.isalnum())[:12]
    return f"{base}{purpose[:6]}{_global_suffix(cluster, purpose)}"


def container_registry(cluster: str) -> str:
    """Container registry names are global, 5-50 letters and digits."""
    base = "".join(ch for ch in cluster if ch.isalnum())[:20]
    return f"{base}acr{_global_suffix(cluster, 'acr')}"


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


def nat_host(cluster: str, index: int) -> str:
    return f"{cluster}-nat-{index}"


# --------------------------------------------------------------------------- machine images

def compute_gallery(cluster: str) -> str:
    """Compute Gallery names allow letters, digits, and '_' or '.' inside; no '-' (Azure's naming rules)."""
    return "".join(ch if ch.isalnum() else "_" for ch in cluster) + "_images"


def gallery_image(cluster: str, kind: str) -> str:
    """An image definition of the cluster's gallery, e.g. ``prod-cpu`` (infra/machine_image.py KINDS)."""
    return f"{cluster}-{kind}"


def image_template(cluster: str, kind: str, version: str) -> str:
    """The Image Builder template that builds one version of one image, e.g. ``prod-gpu-1.2.0``."""
    return f"{cluster}-{kind}-{version}"
