"""Checks of single config values that Azure or Kubernetes would otherwise refuse later.

Each returns nothing or raises ``ConfigError`` naming the key, the value and what is accepted;
``infra.config.cluster_config`` calls them while it reads the keys. Every fact carries its source.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
import struct

from infra.catalog import versions
from infra.config.errors import ConfigError

# RFC 1918 §3: the three blocks reserved for private internets. Only these are accepted for the
# cluster's VNets, the service range and the hub. 100.64.0.0/10 is refused: RFC 6598 reserves it as
# shared address space for carrier-grade NAT between a provider and its customers, not as private
# space, and Python's ipaddress (which the plan's addressing uses) does not count it private either.
PRIVATE_RANGES = tuple(ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))
LINK_LOCAL_RANGE = ipaddress.IPv4Network("169.254.0.0/16")  # RFC 3927
# Azure's virtual public IP for platform services: DNS, DHCP, load-balancer health probes
# (learn.microsoft.com/azure/virtual-network/what-is-ip-address-168-63-129-16).
AZURE_PLATFORM_RANGE = ipaddress.IPv4Network("168.63.129.16/32")
PRIVATE_TEXT = "a private RFC 1918 range inside 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16"

# Ranges a service range must not touch, each with why (named in the message).
RESERVED_FOR_SERVICES = (
    (LINK_LOCAL_RANGE, "link-local, where Azure's instance metadata service 169.254.169.254 is"),
    (AZURE_PLATFORM_RANGE, "Azure's DNS and health-probe address 168.63.129.16"),
    (ipaddress.IPv4Network("127.0.0.0/8"), "loopback (RFC 1122)"),
    (ipaddress.IPv4Network("224.0.0.0/4"), "multicast (RFC 5771)"),
    (ipaddress.IPv4Network("240.0.0.0/4"), "class E, reserved (RFC 1112)"),
    (ipaddress.IPv4Network("0.0.0.0/8"), "'this network' (RFC 1122)"),
)


def check_private_range(key: str, network: ipaddress.IPv4Network) -> None:
    """The range must lie inside one RFC 1918 block; a reserved range is named for what it is."""
    if any(network.subnet_of(block) for block in PRIVATE_RANGES):
        return
    for reserved, why in RESERVED_FOR_SERVICES:
        if network.overlaps(reserved):
            raise ConfigError(key, str(network), f"{PRIVATE_TEXT} (this touches {why})")
    raise ConfigError(key, str(network), f"{PRIVATE_TEXT} (this is public or shared address space)")


# ------------------------------------------------------------------ adminSshPublicKey

# Azure accepts SSH-2 RSA keys of at least 2048 bits and ED25519 keys of 256 bits
# (learn.microsoft.com/azure/virtual-machines/linux/create-ssh-keys-detailed, "Supported SSH key formats");
# ECDSA and DSA are not in that list. The blob layout is RFC 4253 §6.6 (ssh-rsa: string type, mpint e,
# mpint n) and RFC 8709 §4 (ssh-ed25519: string type, string 32-byte key).
MIN_RSA_BITS = 2048
ED25519_KEY_BYTES = 32
SSH_KEY_ACCEPTED = (
    "an OpenSSH public key line 'ssh-ed25519 AAAA... comment' or 'ssh-rsa AAAA... comment' "
    f"(RSA of at least {MIN_RSA_BITS} bits; Azure takes no other type)"
)


def _ssh_strings(blob: bytes) -> list[bytes]:
    """The length-prefixed strings of an SSH public key blob (RFC 4251 §5); ValueError when malformed."""
    strings, position = [], 0
    while position < len(blob):
        if position + 4 > len(blob):
            raise ValueError("truncated")
        (length,) = struct.unpack(">I", blob[position : position + 4])
        position += 4
        if position + length > len(blob):
            raise ValueError("truncated")
        strings.append(blob[position : position + length])
        position += length
    return strings


def check_ssh_public_key(key: str, value: str) -> None:
    fields = value.split(" ")
    if (
        not re.fullmatch(r"\S+ \S+( [^\n\r]*)?", value)
        or len(fields) < 2
        or fields[0] not in ("ssh-ed25519", "ssh-rsa")
    ):
        raise ConfigError(key, value, SSH_KEY_ACCEPTED)
    key_type, body = fields[0], fields[1]
    try:
        blob = base64.b64decode(body, validate=True)
        strings = _ssh_strings(blob)
    except (binascii.Error, ValueError):
        raise ConfigError(key, value, f"{SSH_KEY_ACCEPTED}: its body is not a base64 SSH key blob") from None
    if not strings or strings[0].decode("latin-1") != key_type:
        raise ConfigError(key, value, f"{SSH_KEY_ACCEPTED}: the body does not encode a {key_type} key")
    if key_type == "ssh-ed25519":
        if len(strings) != 2 or len(strings[1]) != ED25519_KEY_BYTES:
            raise ConfigError(key, value, f"{SSH_KEY_ACCEPTED}: an ed25519 key holds {ED25519_KEY_BYTES} bytes")
        return
    if len(strings) != 3:
        raise ConfigError(key, value, f"{SSH_KEY_ACCEPTED}: an RSA key holds an exponent and a modulus")
    bits = int.from_bytes(strings[2], "big").bit_length()
    if bits < MIN_RSA_BITS:
        raise ConfigError(key, value, f"{SSH_KEY_ACCEPTED}: this RSA key has {bits} bits")


# ------------------------------------------------------------------ kubernetesVersion

KUBERNETES_VERSION = re.compile(r"1\.([0-9]+)\.(0|[1-9][0-9]*)")


def kubernetes_releases_text() -> str:
    return ", ".join(f"{minor}.0-{minor}.{newest}" for minor, newest in versions.KUBERNETES_NEWEST_PATCH.items())


def check_kubernetes_version(key: str, value: str) -> None:
    """A published release of a minor whose kube-scheduler the project pins (infra/catalog/versions.py)."""
    match = KUBERNETES_VERSION.fullmatch(value)
    minor = f"1.{match.group(1)}" if match else None
    newest = versions.KUBERNETES_NEWEST_PATCH.get(minor) if minor else None
    if (
        match is None
        or newest is None
        or minor not in versions.SCHEDULER_PLUGINS_BY_KUBERNETES_MINOR
        or int(match.group(2)) > newest
    ):
        raise ConfigError(key, value, f"a Kubernetes release the project pins: {kubernetes_releases_text()}")


# ------------------------------------------------------------------ azure-native:location

# Azure's public-cloud physical regions, by the names `az account list-locations --query
# "[?metadata.regionType=='Physical'].name"` prints (learn.microsoft.com/azure/reliability/regions-list).
# A region Azure adds later belongs here; a display name ("East US") or a logical one ("unitedstates")
# is not a place resources can be created.
AZURE_REGIONS = frozenset(
    [
        "australiacentral",
        "australiacentral2",
        "australiaeast",
        "australiasoutheast",
        "brazilsouth",
        "brazilsoutheast",
        "canadacentral",
        "canadaeast",
        "centralindia",
        "centralus",
        "chilecentral",
        "eastasia",
        "eastus",
        "eastus2",
        "francecentral",
        "francesouth",
        "germanynorth",
        "germanywestcentral",
        "indonesiacentral",
        "israelcentral",
        "italynorth",
        "japaneast",
        "japanwest",
        "jioindiacentral",
        "jioindiawest",
        "koreacentral",
        "koreasouth",
        "malaysiawest",
        "mexicocentral",
        "newzealandnorth",
        "northcentralus",
        "northeurope",
        "norwayeast",
        "norwaywest",
        "polandcentral",
        "qatarcentral",
        "southafricanorth",
        "southafricawest",
        "southcentralus",
        "southeastasia",
        "southindia",
        "spaincentral",
        "swedencentral",
        "switzerlandnorth",
        "switzerlandwest",
        "uaecentral",
        "uaenorth",
        "uksouth",
        "ukwest",
        "westcentralus",
        "westeurope",
        "westindia",
        "westus",
        "westus2",
        "westus3",
    ]
)


LOCATION_ACCEPTED = (
    "an Azure region name as `az account list-locations` prints it, such as eastus, westus3 or westeurope"
)


def check_location(key: str, value: object) -> str:
    if not isinstance(value, str) or value not in AZURE_REGIONS:
        raise ConfigError(key, value, LOCATION_ACCEPTED)
    return value
