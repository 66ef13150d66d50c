"""Azure's documented rules that span properties or resources, which the SDK models cannot express.

Each rule names the page that documents it and checks only what the plans declare. A rule reads every
azure-native resource of a plan, ``(type token, name, inputs)``, and returns ``Violation``s whose kind
is the rule's name (``tests/azure_models.py`` checks each resource alone against Azure's models).
"""

from __future__ import annotations

import base64
import ipaddress
import struct
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from tests.azure_models import Violation

Resource = tuple[str, str, dict[str, Any]]  # (type token, resource name, inputs)
# customData "is decoded to a binary array ... The maximum length of the binary array is 65535 bytes"
# (learn.microsoft.com/dotnet/api/azure.resourcemanager.compute.models.virtualmachineosprofile.customdata).
CUSTOM_DATA_MAX_BYTES = 65_535


@dataclass(frozen=True)
class Rule:
    name: str
    what: str  # the rule, as the documentation states it
    source: str  # the page that documents it
    check: Callable[[list[Resource]], Iterable[Violation]]


def _of(resources: list[Resource], kind: str) -> list[tuple[str, dict[str, Any]]]:
    return [(name, inputs) for token, name, inputs in resources if token == f"azure-native:{kind}"]


def _one_primary(path: str, items: list[dict[str, Any]], what: str) -> Iterable[str]:
    if len(items) > 1:
        primaries = [i for i, item in enumerate(items) if item.get("primary") is True]
        if len(primaries) != 1:
            yield f"{path}: {len(items)} {what}, {len(primaries)} marked primary; exactly one must be"


def _primary_ip_configurations(resources: list[Resource]) -> Iterable[Violation]:
    for name, inputs in _of(resources, "network:NetworkInterface"):
        for problem in _one_primary("ipConfigurations", inputs.get("ipConfigurations", []), "IP configurations"):
            yield Violation("primary-ip-configuration", f"{name}.{problem.split(':')[0]}", problem)
    for name, inputs in _of(resources, "compute:VirtualMachineScaleSet"):
        nics = (
            inputs.get("virtualMachineProfile", {}).get("networkProfile", {}).get("networkInterfaceConfigurations", [])
        )
        path = "virtualMachineProfile.networkProfile.networkInterfaceConfigurations"
        for problem in _one_primary(path, nics, "network interfaces"):
            yield Violation("primary-ip-configuration", f"{name}.{path}", problem)
        for i, nic in enumerate(nics):
            for problem in _one_primary(
                f"{path}[{i}].ipConfigurations", nic.get("ipConfigurations", []), "IP configurations"
            ):
                yield Violation("primary-ip-configuration", f"{name}.{path}[{i}].ipConfigurations", problem)


def _prefixes(subnet: dict[str, Any]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    found = ([subnet["addressPrefix"]] if "addressPrefix" in subnet else []) + subnet.get("addressPrefixes", [])
    return [ipaddress.ip_network(p) for p in found]


def _subnets_inside_their_vnet(resources: list[Resource]) -> Iterable[Violation]:
    spaces: dict[tuple[Any, Any], list[Any]] = {}
    members: dict[tuple[Any, Any], list[tuple[str, Any]]] = defaultdict(list)
    for name, inputs in _of(resources, "network:VirtualNetwork"):
        key = (inputs.get("resourceGroupName"), inputs.get("virtualNetworkName"))
        spaces[key] = [ipaddress.ip_network(p) for p in inputs.get("addressSpace", {}).get("addressPrefixes", [])]
        for subnet in inputs.get("subnets", []):
            members[key] += [(f"{name}.subnets[{subnet.get('name')}]", p) for p in _prefixes(subnet)]
    for name, inputs in _of(resources, "network:Subnet"):
        key = (inputs.get("resourceGroupName"), inputs.get("virtualNetworkName"))
        members[key] += [(name, p) for p in _prefixes(inputs)]
    for key, prefixes in members.items():
        space = spaces.get(key)
        for where, prefix in prefixes:
            if space is not None and not any(prefix.subnet_of(s) for s in space if s.version == prefix.version):
                yield Violation(
                    "subnet-in-vnet",
                    where,
                    f"{prefix} is outside the VNet's address space " + ", ".join(map(str, space)),
                )
        for i, (where, prefix) in enumerate(prefixes):
            for other_where, other in prefixes[i + 1 :]:
                if prefix.version == other.version and prefix.overlaps(other):
                    yield Violation("subnet-in-vnet", where, f"{prefix} overlaps {other} of {other_where}")


def _nsg_priorities(resources: list[Resource]) -> Iterable[Violation]:
    for name, inputs in _of(resources, "network:NetworkSecurityGroup"):
        seen: dict[tuple[Any, Any], str] = {}
        for rule in inputs.get("securityRules", []):
            priority, direction = rule.get("priority"), rule.get("direction")
            if not isinstance(priority, int) or not 100 <= priority <= 4096:
                yield Violation(
                    "nsg-priority",
                    f"{name}.securityRules[{rule.get('name')}]",
                    f"priority {priority!r}: a rule's priority is 100 to 4096",
                )
            elif (priority, direction) in seen:
                yield Violation(
                    "nsg-priority",
                    f"{name}.securityRules[{rule.get('name')}]",
                    f"{direction} priority {priority} is also {seen[priority, direction]}'s",
                )
            else:
                seen[priority, direction] = rule.get("name")


def _public_ip_prefix_length(resources: list[Resource]) -> Iterable[Violation]:
    for name, inputs in _of(resources, "network:PublicIPPrefix"):
        length = inputs.get("prefixLength")
        if inputs.get("publicIPAddressVersion", "IPv4") == "IPv4" and not (
            isinstance(length, int) and 28 <= length <= 31
        ):
            yield Violation(
                "public-ip-prefix-size",
                f"{name}.prefixLength",
                f"/{length}: an IPv4 public IP prefix is /28 (16 addresses) to /31 (2)",
            )


def _single_placement_group(resources: list[Resource]) -> Iterable[Violation]:
    for name, inputs in _of(resources, "compute:VirtualMachineScaleSet"):
        capacity = inputs.get("sku", {}).get("capacity", 0)
        if inputs.get("singlePlacementGroup", True) and isinstance(capacity, int) and capacity > 100:
            yield Violation(
                "single-placement-group",
                f"{name}.sku.capacity",
                f"{capacity} VMs in a single placement group, which holds at most 100",
            )


def _upgrade_policy(resources: list[Resource]) -> Iterable[Violation]:
    for name, inputs in _of(resources, "compute:VirtualMachineScaleSet"):
        policy = inputs.get("upgradePolicy", {})
        mode = policy.get("mode", "Manual")
        if policy.get("automaticOSUpgradePolicy", {}).get("enableAutomaticOSUpgrade") and mode == "Manual":
            yield Violation(
                "upgrade-policy",
                f"{name}.upgradePolicy",
                "automatic OS upgrades need upgradePolicy.mode Automatic or Rolling, not Manual",
            )
        if "rollingUpgradePolicy" in policy and mode != "Rolling":
            yield Violation(
                "upgrade-policy",
                f"{name}.upgradePolicy",
                f"rollingUpgradePolicy is set but upgradePolicy.mode is {mode}, not Rolling",
            )


def _os_disks(resources: list[Resource]) -> Iterable[tuple[str, dict[str, Any]]]:
    for name, inputs in _of(resources, "compute:VirtualMachine"):
        yield f"{name}.storageProfile.osDisk", inputs.get("storageProfile", {}).get("osDisk", {})
    for name, inputs in _of(resources, "compute:VirtualMachineScaleSet"):
        profile = inputs.get("virtualMachineProfile", {})
        yield f"{name}.virtualMachineProfile.storageProfile.osDisk", profile.get("storageProfile", {}).get("osDisk", {})


def _ephemeral_os_disk_caching(resources: list[Resource]) -> Iterable[Violation]:
    for where, disk in _os_disks(resources):
        if disk.get("diffDiskSettings", {}).get("option") == "Local" and disk.get("caching") != "ReadOnly":
            yield Violation(
                "ephemeral-os-disk",
                f"{where}.caching",
                f"{disk.get('caching')!r}: an ephemeral OS disk takes only ReadOnly caching",
            )


def _ha_ports(resources: list[Resource]) -> Iterable[Violation]:
    for name, inputs in _of(resources, "network:LoadBalancer"):
        public = any(
            "publicIPAddress" in f or "publicIPPrefix" in f for f in inputs.get("frontendIPConfigurations", [])
        )
        standard = inputs.get("sku", {}).get("name") == "Standard"
        for rule in inputs.get("loadBalancingRules", []):
            if rule.get("protocol") == "All" or rule.get("frontendPort") == 0 or rule.get("backendPort") == 0:
                ha = rule.get("protocol") == "All" and rule.get("frontendPort") == 0 and rule.get("backendPort") == 0
                if not ha or public or not standard:
                    yield Violation(
                        "ha-ports",
                        f"{name}.loadBalancingRules[{rule.get('name')}]",
                        "HA ports (protocol All, frontend and backend port 0, together) are for an "
                        "internal Standard load balancer only",
                    )


def _nat_gateway_one_vnet(resources: list[Resource]) -> Iterable[Violation]:
    vnets: dict[str, set[Any]] = defaultdict(set)
    for _, inputs in _of(resources, "network:VirtualNetwork"):
        for subnet in inputs.get("subnets", []):
            if "natGateway" in subnet:
                vnets[subnet["natGateway"].get("id")].add(inputs.get("virtualNetworkName"))
    for _, inputs in _of(resources, "network:Subnet"):
        if "natGateway" in inputs:
            vnets[inputs["natGateway"].get("id")].add(inputs.get("virtualNetworkName"))
    for gateway, names in vnets.items():
        if len(names) > 1:
            yield Violation(
                "nat-gateway-one-vnet",
                str(gateway),
                f"subnets of {len(names)} VNets use it: " + ", ".join(sorted(map(str, names))),
            )


_SSH_KEY_TYPES = {"ssh-rsa", "ssh-ed25519"}


def ssh_key_problem(key_data: Any) -> str | None:
    """Why Azure would refuse an OpenSSH public key line, or None: a type Azure takes and a base64 body
    that decodes to a key of that type (the body starts with its own type name, length-prefixed)."""
    fields = str(key_data).split()
    if len(fields) < 2 or fields[0] not in _SSH_KEY_TYPES:
        return "not '<type> <base64 key>' with type " + " or ".join(sorted(_SSH_KEY_TYPES))
    try:
        blob = base64.b64decode(fields[1], validate=True)
    except ValueError:
        return f"the body of the {fields[0]} key is not valid base64"
    if len(blob) < 4 or blob[4 : 4 + struct.unpack(">I", blob[:4])[0]] != fields[0].encode():
        return f"the body does not hold a {fields[0]} key"
    if fields[0] == "ssh-rsa":
        e_len = struct.unpack(">I", blob[11:15])[0]
        n_len = struct.unpack(">I", blob[15 + e_len : 19 + e_len])[0]
        modulus = blob[19 + e_len : 19 + e_len + n_len].lstrip(b"\0")
        if len(modulus) * 8 < 2048:
            return f"an RSA key of {len(modulus) * 8} bits; Azure takes 2048 bits or more"
    elif len(blob) != 51:  # type (4 + 11) and key (4 + 32)
        return "the body is not a 32-byte ed25519 key"
    return None


def _ssh_keys(resources: list[Resource]) -> Iterable[Violation]:
    profiles = [(f"{n}.osProfile", i.get("osProfile", {})) for n, i in _of(resources, "compute:VirtualMachine")]
    profiles += [
        (f"{n}.virtualMachineProfile.osProfile", i.get("virtualMachineProfile", {}).get("osProfile", {}))
        for n, i in _of(resources, "compute:VirtualMachineScaleSet")
    ]
    for where, profile in profiles:
        for i, key in enumerate(profile.get("linuxConfiguration", {}).get("ssh", {}).get("publicKeys", [])):
            problem = ssh_key_problem(key.get("keyData"))
            if problem:
                yield Violation("ssh-public-key", f"{where}.linuxConfiguration.ssh.publicKeys[{i}]", problem)


def _key_vault_soft_delete(resources: list[Resource]) -> Iterable[Violation]:
    for name, inputs in _of(resources, "keyvault:Vault"):
        properties = inputs.get("properties", {})
        days = properties.get("softDeleteRetentionInDays", 90)
        if not (isinstance(days, int) and 7 <= days <= 90):
            yield Violation(
                "key-vault-soft-delete",
                f"{name}.properties.softDeleteRetentionInDays",
                f"{days!r}: soft-delete retention is 7 to 90 days",
            )
        if properties.get("enableSoftDelete") is False:
            yield Violation(
                "key-vault-soft-delete",
                f"{name}.properties.enableSoftDelete",
                "soft delete can no longer be turned off",
            )


def _ip_configurations_per_nic(resources: list[Resource]) -> Iterable[Violation]:
    nics = [
        (f"{n}.ipConfigurations", i.get("ipConfigurations", [])) for n, i in _of(resources, "network:NetworkInterface")
    ]
    for name, inputs in _of(resources, "compute:VirtualMachineScaleSet"):
        path = "virtualMachineProfile.networkProfile.networkInterfaceConfigurations"
        configs = (
            inputs.get("virtualMachineProfile", {}).get("networkProfile", {}).get("networkInterfaceConfigurations", [])
        )
        nics += [
            (f"{name}.{path}[{i}].ipConfigurations", nic.get("ipConfigurations", [])) for i, nic in enumerate(configs)
        ]
    for where, configurations in nics:
        if len(configurations) > 256:
            yield Violation(
                "ip-configurations-per-nic",
                where,
                f"{len(configurations)} IP configurations; a network interface holds at most 256",
            )


def _custom_data_size(resources: list[Resource]) -> Iterable[Violation]:
    profiles = [(f"{n}.osProfile", i.get("osProfile", {})) for n, i in _of(resources, "compute:VirtualMachine")]
    profiles += [
        (f"{n}.virtualMachineProfile.osProfile", i.get("virtualMachineProfile", {}).get("osProfile", {}))
        for n, i in _of(resources, "compute:VirtualMachineScaleSet")
    ]
    for where, profile in profiles:
        data = profile.get("customData")
        if isinstance(data, str):
            try:
                size = len(base64.b64decode(data, validate=True))
            except ValueError:
                yield Violation("custom-data", f"{where}.customData", "not valid base64")
                continue
            if size > CUSTOM_DATA_MAX_BYTES:
                yield Violation(
                    "custom-data", f"{where}.customData", f"{size} bytes decoded; at most {CUSTOM_DATA_MAX_BYTES}"
                )


def _tags(resources: list[Resource]) -> Iterable[Violation]:
    for token, name, inputs in resources:
        tags = inputs.get("tags") or {}
        longest_name = 128 if token == "azure-native:storage:StorageAccount" else 512
        if len(tags) > 50:
            yield Violation("tags", f"{name}.tags", f"{len(tags)} tags; a resource takes at most 50")
        for key, value in tags.items():
            if len(key) > longest_name or any(c in key for c in "<>%&\\?/"):
                yield Violation(
                    "tags",
                    f"{name}.tags[{key!r}]",
                    f"a tag name is at most {longest_name} characters without any of < > % & \\ ? /",
                )
            if len(str(value)) > 256:
                yield Violation(
                    "tags", f"{name}.tags[{key!r}]", f"a tag value is at most 256 characters, not {len(value)}"
                )


RULES: tuple[Rule, ...] = (
    Rule(
        "primary-ip-configuration",
        "a network interface with several IP configurations, and a scale set with several network interfaces, "
        "marks exactly one of them primary",
        "https://learn.microsoft.com/azure/virtual-network/ip-services/virtual-network-network-interface-addresses",
        _primary_ip_configurations,
    ),
    Rule(
        "subnet-in-vnet",
        "every subnet's range lies in its VNet's address space and overlaps no other subnet",
        "https://learn.microsoft.com/azure/virtual-network/virtual-network-manage-subnet",
        _subnets_inside_their_vnet,
    ),
    Rule(
        "nsg-priority",
        "a security rule's priority is 100 to 4096, unique per direction within its NSG",
        "https://learn.microsoft.com/azure/virtual-network/network-security-groups-overview",
        _nsg_priorities,
    ),
    Rule(
        "public-ip-prefix-size",
        "an IPv4 public IP prefix is /28 to /31",
        "https://learn.microsoft.com/azure/virtual-network/ip-services/public-ip-address-prefix",
        _public_ip_prefix_length,
    ),
    Rule(
        "single-placement-group",
        "a scale set in a single placement group holds at most 100 VMs",
        "https://learn.microsoft.com/azure/virtual-machine-scale-sets/virtual-machine-scale-sets-placement-groups",
        _single_placement_group,
    ),
    Rule(
        "upgrade-policy",
        "automatic OS upgrades need mode Automatic or Rolling; a rolling policy needs Rolling",
        "https://learn.microsoft.com/azure/virtual-machine-scale-sets/virtual-machine-scale-sets-automatic-upgrade",
        _upgrade_policy,
    ),
    Rule(
        "ephemeral-os-disk",
        "an ephemeral (Local) OS disk uses ReadOnly caching",
        "https://learn.microsoft.com/azure/virtual-machines/ephemeral-os-disks",
        _ephemeral_os_disk_caching,
    ),
    Rule(
        "ha-ports",
        "an HA-ports rule (protocol All, ports 0) is for an internal Standard load balancer",
        "https://learn.microsoft.com/azure/load-balancer/load-balancer-ha-ports-overview",
        _ha_ports,
    ),
    Rule(
        "nat-gateway-one-vnet",
        "a NAT gateway serves subnets of one virtual network only",
        "https://learn.microsoft.com/azure/nat-gateway/nat-overview",
        _nat_gateway_one_vnet,
    ),
    Rule(
        "ssh-public-key",
        "a Linux VM's SSH key is an OpenSSH RSA key of 2048 bits or more, or an Ed25519 key",
        "https://learn.microsoft.com/azure/virtual-machines/linux/mac-create-ssh-keys",
        _ssh_keys,
    ),
    Rule(
        "ip-configurations-per-nic",
        "a network interface has at most 256 private IP addresses",
        "https://learn.microsoft.com/azure/azure-resource-manager/management/azure-subscription-service-limits",
        _ip_configurations_per_nic,
    ),
    Rule(
        "custom-data",
        "custom data is base64 that decodes to at most 65535 bytes",
        "https://learn.microsoft.com/rest/api/compute/virtual-machines/create-or-update",
        _custom_data_size,
    ),
    Rule(
        "tags",
        "at most 50 tags a resource; a name at most 512 characters (a storage account's 128) without "
        "< > % & \\ ? /, a value at most 256",
        "https://learn.microsoft.com/azure/azure-resource-manager/management/tag-resources",
        _tags,
    ),
    Rule(
        "key-vault-soft-delete",
        "soft delete is always on; its retention is 7 to 90 days",
        "https://learn.microsoft.com/azure/key-vault/general/soft-delete-overview",
        _key_vault_soft_delete,
    ),
)


def check_rules(resources: list[Resource]) -> list[Violation]:
    return [violation for rule in RULES for violation in rule.check(resources)]
