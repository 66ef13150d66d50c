"""The machines of an offline plan, read back from what the plan recorded.

A VM's address is its NIC's static address in resources.json; a scale set's instances take
addresses from their subnet, as Azure hands them out (the first four of a subnet are Azure's): each
instance's NIC holds its model's IP configurations, the primary (the node's address) and then one per
pod (what Azure CNI gives pods), consecutive, instance after instance. The apiserver scale set (the one
carrying a machine role tag) is not a node pool: its instances take the lowest addresses of their subnet
that no static address (the load balancer frontend, a VM's NIC) holds, as Azure's dynamic allocation does.
What a machine runs is its rendered systemd units under ``files/<resource>/etc/systemd/system``.
"""

from __future__ import annotations

import ipaddress
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from infra.facts import tags
from tests.e2e.imds import SUBSCRIPTION

VM = "azure-native:compute:VirtualMachine"
SCALE_SET = "azure-native:compute:VirtualMachineScaleSet"
NIC = "azure-native:network:NetworkInterface"
VNET = "azure-native:network:VirtualNetwork"
LOAD_BALANCER = "azure-native:network:LoadBalancer"
KEY_VAULT_SECRET = "azure-native:keyvault:Secret"
# Azure reserves the first four addresses of every subnet and the last one
# (learn.microsoft.com/azure/virtual-network/virtual-networks-faq, "Are there any restrictions on using IP addresses").
AZURE_RESERVED_FIRST = 4
UNIT_DIR = "etc/systemd/system"
FETCH_SCRIPT = "usr/local/sbin/supercluster-fetch-secrets"


@dataclass(frozen=True)
class Unit:
    """A rendered systemd unit: its sections' settings, a key possibly repeated."""

    name: str
    settings: dict[str, dict[str, list[str]]]

    def get(self, section: str, key: str) -> list[str]:
        return self.settings.get(section, {}).get(key, [])

    @property
    def restart_sec(self) -> float | None:
        """Seconds systemd waits before starting it again after it exits (``Restart=``), or None."""
        if self.get("Service", "Restart") in ([], ["no"]):
            return None
        return float((self.get("Service", "RestartSec") or ["0.1"])[0])  # systemd's default RestartSec

    @property
    def exec_start(self) -> list[str]:
        (line,) = self.get("Service", "ExecStart")
        return shlex.split(line)


def parse_unit(name: str, text: str) -> Unit:
    settings: dict[str, dict[str, list[str]]] = {}
    section = ""
    for line in text.replace("\\\n", " ").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        settings.setdefault(section, {}).setdefault(key.strip(), []).append(" ".join(value.split()))
    return Unit(name, settings)


@dataclass(frozen=True)
class Machine:
    resource: str  # the Pulumi resource name, which names its folder under files/
    name: str  # the VM's (or an instance's) hostname
    ip: str
    files: Path  # files/<resource>
    subnet: ipaddress.IPv4Network | None = None
    pod_ips: tuple[str, ...] = ()  # its NIC's secondary IP configurations' addresses
    azure_id: str = ""  # its Azure resource ID (a VM, or a scale set's instance), in the box's subscription
    identities: tuple[str, ...] = ()  # the user-assigned identities the plan attaches to it (``_identity_ids``)

    def unit(self, name: str) -> Unit:
        return parse_unit(name, (self.files / UNIT_DIR / name).read_text())

    def has_unit(self, name: str) -> bool:
        return (self.files / UNIT_DIR / name).exists()

    def fetched_secrets(self) -> list[tuple[str, str, str]]:
        """``(secret name, path, mode)`` for every ``fetch`` line of the rendered fetch script."""
        script = self.files / FETCH_SCRIPT
        if not script.exists():
            return []
        return [tuple(m.groups()) for m in re.finditer(r"^fetch (\S+) (\S+) (\d{4})$", script.read_text(), re.M)]


@dataclass(frozen=True)
class ScaleSet:
    resource: str
    computer_name_prefix: str
    vm_size: str
    subnet: ipaddress.IPv4Network
    files: Path
    ip_configurations: int  # on each instance's NIC: the primary and one per pod
    azure_id: str = ""  # the scale set's Azure resource ID, in the box's subscription
    identities: tuple[str, ...] = ()  # the user-assigned identities the plan attaches to it (``_identity_ids``)

    @property
    def pool(self) -> str:
        """The node pool it is a shard of: resources are named ``<cluster>-pool-<pool>-s<NNN>``."""
        return re.fullmatch(r".+?-pool-(.+)-s\d{3}", self.resource).group(1)

    @property
    def first_shard(self) -> bool:
        return self.resource.endswith("-s000")

    def instance(self, index: int) -> Machine:
        """Instance ``index`` as Azure names it (prefix + six base-36 digits), its NIC's addresses the
        ``index``-th run of free ones."""
        name = f"{self.computer_name_prefix}{_base36(index):0>6}"
        first = self.subnet.network_address + AZURE_RESERVED_FIRST + index * self.ip_configurations
        addresses = [str(first + i) for i in range(self.ip_configurations)]
        return Machine(
            self.resource,
            name,
            addresses[0],
            self.files,
            self.subnet,
            tuple(addresses[1:]),
            f"{self.azure_id}/virtualMachines/{index}",
            self.identities,
        )


def _azure_id(resource_group: str, kind: str, name: str) -> str:
    """A compute resource's ID as Azure forms it, in the box's stand-in subscription (tests/e2e/imds.py)."""
    return f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{resource_group}/providers/Microsoft.Compute/{kind}/{name}"


def _identity_ids(resource: dict[str, Any]) -> tuple[str, ...]:
    """The user-assigned identities a VM or scale set of the plan carries (``identity.userAssignedIdentities``), as
    Azure names them in the box's subscription: the plan's mock IDs spell the type's plural by rule
    (``userAssignedIdentitys``); the group and name are the plan's."""
    ids = []
    for plan_id in (resource["inputs"].get("identity") or {}).get("userAssignedIdentities") or []:
        parts = plan_id.split("/")
        group, name = parts[parts.index("resourceGroups") + 1], parts[-1]
        ids.append(
            f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{group}"
            f"/providers/Microsoft.ManagedIdentity/userAssignedIdentities/{name}"
        )
    return tuple(ids)


def _subnet_key(subnet_id: str) -> str:
    """``<vnet>/<subnet>`` of an Azure subnet id, as ``Plan.subnets`` keys them."""
    vnet, subnet = subnet_id.split("/virtualNetworks/")[1].split("/subnets/")
    return f"{vnet}/{subnet}"


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        number, rest = divmod(number, 36)
        out = digits[rest] + out
        if not number:
            return out


@dataclass(frozen=True)
class Plan:
    directory: Path
    resources: list[dict[str, Any]]

    @classmethod
    def load(cls, directory: Path) -> Plan:
        return cls(directory, json.loads((directory / "resources.json").read_text()))

    def of_type(self, typ: str) -> list[dict[str, Any]]:
        return [r for r in self.resources if r["type"] == typ]

    def vms(self) -> list[Machine]:
        subnets = self.subnets()
        nics = {r["inputs"]["networkInterfaceName"]: r["inputs"]["ipConfigurations"] for r in self.of_type(NIC)}
        machines = []
        for vm in self.of_type(VM):
            primary, *secondaries = nics[vm["inputs"]["networkProfile"]["networkInterfaces"][0]["id"].rsplit("/", 1)[1]]
            machines.append(
                Machine(
                    vm["name"],
                    vm["inputs"]["vmName"],
                    primary["privateIPAddress"],
                    self.directory / "files" / vm["name"],
                    subnets[_subnet_key(primary["subnet"]["id"])],
                    tuple(c["privateIPAddress"] for c in secondaries),
                    _azure_id(vm["inputs"]["resourceGroupName"], "virtualMachines", vm["inputs"]["vmName"]),
                    _identity_ids(vm),
                )
            )
        return machines

    def subnets(self) -> dict[str, ipaddress.IPv4Network]:
        """``{"<vnet azure name>/<subnet>": prefix}``."""
        return {
            f"{v['inputs']['virtualNetworkName']}/{s['name']}": ipaddress.ip_network(s["addressPrefix"])
            for v in self.of_type(VNET)
            for s in v["inputs"].get("subnets", [])
        }

    def scale_sets(self) -> list[ScaleSet]:
        """The node pools' scale sets (every scale set but the apiservers')."""
        subnets = self.subnets()
        result = []
        for vmss in self.of_type(SCALE_SET):
            if tags.MACHINE_ROLE in (vmss["inputs"].get("tags") or {}):
                continue
            profile = vmss["inputs"]["virtualMachineProfile"]
            ip_configurations = profile["networkProfile"]["networkInterfaceConfigurations"][0]["ipConfigurations"]
            result.append(
                ScaleSet(
                    vmss["name"],
                    profile["osProfile"]["computerNamePrefix"],
                    vmss["inputs"]["sku"]["name"],
                    subnets[_subnet_key(ip_configurations[0]["subnet"]["id"])],
                    self.directory / "files" / vmss["name"],
                    len(ip_configurations),
                    _azure_id(
                        vmss["inputs"]["resourceGroupName"], "virtualMachineScaleSets", vmss["inputs"]["vmScaleSetName"]
                    ),
                    _identity_ids(vmss),
                )
            )
        return result

    def apiserver_scale_set(self) -> dict[str, Any]:
        """The apiserver scale set (the one scale set with a machine role tag)."""
        (vmss,) = [r for r in self.of_type(SCALE_SET) if tags.MACHINE_ROLE in (r["inputs"].get("tags") or {})]
        return vmss

    def apiserver_model(self) -> dict[str, Any]:
        """The apiserver scale set's model as Azure keeps it: its size and its instances' profile (image,
        cloud-init, extensions). A deploy that changes it starts a rolling upgrade."""
        inputs = self.apiserver_scale_set()["inputs"]
        return {"sku": inputs["sku"]["name"], "virtualMachineProfile": inputs["virtualMachineProfile"]}

    def rolling_upgrade_policy(self) -> dict[str, Any]:
        """The apiserver scale set's rendered ``upgradePolicy.rollingUpgradePolicy``."""
        return self.apiserver_scale_set()["inputs"]["upgradePolicy"]["rollingUpgradePolicy"]

    def apiserver_instances(self) -> list[Machine]:
        """The apiserver scale set's instances (``sku.capacity`` of them), named as Azure names them, each on the
        next free address of its subnet (below)."""
        vmss = self.apiserver_scale_set()
        profile = vmss["inputs"]["virtualMachineProfile"]
        (ip_configuration,) = profile["networkProfile"]["networkInterfaceConfigurations"][0]["ipConfigurations"]
        subnet = self.subnets()[_subnet_key(ip_configuration["subnet"]["id"])]
        free = self.free_addresses(subnet)
        prefix = profile["osProfile"]["computerNamePrefix"]
        return [
            Machine(
                vmss["name"],
                f"{prefix}{_base36(i):0>6}",
                free[i],
                self.directory / "files" / vmss["name"],
                subnet,
                identities=_identity_ids(vmss),
            )
            for i in range(int(vmss["inputs"]["sku"]["capacity"]))
        ]

    def repair_probe(self) -> dict[str, Any]:
        """The apiserver scale set's health signal, as rendered: its Application Health extension's settings
        (``requestPath``, ``intervalInSeconds``, ``numberOfProbes``, ...), which automatic repairs act on."""
        extensions = self.apiserver_scale_set()["inputs"]["virtualMachineProfile"]["extensionProfile"]["extensions"]
        (health,) = [e for e in extensions if e["type"] == "ApplicationHealthLinux"]
        return health["settings"]

    def free_addresses(self, subnet: ipaddress.IPv4Network) -> list[str]:
        """``subnet``'s addresses Azure may hand out (from the fifth, never the broadcast) that no static address
        of the plan holds, lowest first."""
        static = {c.get("privateIPAddress") for nic in self.of_type(NIC) for c in nic["inputs"]["ipConfigurations"]}
        static |= {
            f.get("privateIPAddress")
            for lb in self.of_type(LOAD_BALANCER)
            for f in lb["inputs"].get("frontendIPConfigurations", [])
        }
        hosts = list(subnet)[AZURE_RESERVED_FIRST:-1]
        return [str(a) for a in hosts if str(a) not in static]

    def load_balancer(self, suffix: str) -> dict[str, Any]:
        (lb,) = [r for r in self.of_type(LOAD_BALANCER) if r["name"].endswith(suffix)]
        return lb["inputs"]

    def key_vault_secret_names(self) -> set[str]:
        return {r["inputs"]["secretName"] for r in self.of_type(KEY_VAULT_SECRET)}

    def kubernetes_objects(self) -> list[tuple[Path, dict[str, Any]]]:
        root = self.directory / "files" / "k8s"
        return [(path, yaml.safe_load(path.read_text())) for path in sorted(root.rglob("*.yaml"))]
