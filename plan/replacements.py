"""Which input changes force a replacement, decided offline from a documented table.

The offline plan has no provider to ask, so this module is deliberately conservative
and says where each rule comes from. A change forces a replacement when it touches:

1. an input that is part of the Azure resource id, or the location: an azure-native
   resource's top-level ``resourceGroupName``, ``scope``, and ``...Name`` inputs are the
   path segments of its ARM id (a different id is a different resource), and Azure
   resources never move regions;
2. a create-only property listed in ``CREATE_ONLY`` below, each with its source;
3. any input of a ``tls:`` or ``random:`` resource (both bridged providers mark every
   argument ForceNew: a new key, certificate or token is a new resource);
4. a path the program listed in ``replaceOnChanges``.

Changes under an ``ignoreChanges`` path are never applied, so they replace nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Create-only properties per resource type: Azure refuses to change them on an existing
# resource (or the provider re-creates it). Paths use Pulumi's property-path syntax;
# ``[*]`` matches any list index.
_OS_PROFILE = 'Azure Compute REST API, OSProfile: "cannot be updated after the VM is created"'
_VMSS_PROFILE = "Azure Compute REST API, VirtualMachineScaleSetOSProfile: fixed at creation"
_SUBNET_PREFIX = (
    "Azure refuses to change the prefix of a subnet that holds NICs: every machine in it would have to go first"
)
CREATE_ONLY: dict[str, dict[str, str]] = {
    "azure-native:compute:VirtualMachine": {
        "osProfile.customData": _OS_PROFILE,
        "osProfile.computerName": _OS_PROFILE,
        "osProfile.adminUsername": _OS_PROFILE,
        "osProfile.linuxConfiguration": (
            "Azure refuses it on an existing VM: \"Changing property 'linuxConfiguration.ssh.publicKeys' is not "
            'allowed" (PropertyChangeNotAllowed, Azure/aks-engine#585; the same for disablePasswordAuthentication)'
        ),
        "zones": "a VM cannot move between availability zones (Azure: re-create it in the new zone)",
        "storageProfile.osDisk.name": "the OS disk is created with the VM; a new name is a new disk",
        "storageProfile.imageReference": "a VM's image is fixed at creation (changing it means re-creating the VM)",
    },
    "azure-native:compute:VirtualMachineScaleSet": {
        "zones": "a scale set's zones are fixed at creation (Azure allows adding zones only via a new scale set "
        "in the general case)",
        "platformFaultDomainCount": "fixed at creation (Azure Compute REST API, VirtualMachineScaleSet)",
        "singlePlacementGroup": "Azure only allows true -> false; treated as create-only (InfiniBand needs true)",
        "orchestrationMode": "fixed at creation (Azure Compute REST API, VirtualMachineScaleSet)",
        "virtualMachineProfile.osProfile.computerNamePrefix": _VMSS_PROFILE,
        "virtualMachineProfile.osProfile.adminUsername": _VMSS_PROFILE,
    },
    "azure-native:network:Subnet": {
        "addressPrefix": _SUBNET_PREFIX,
    },
    # The cluster's VNets declare their subnets inline (components/network.py): a subnet's name is its
    # identity there, and its prefix as fixed as a Subnet resource's. Appending a subnet is an update.
    "azure-native:network:VirtualNetwork": {
        "subnets[*].addressPrefix": _SUBNET_PREFIX,
        "subnets[*].name": "a subnet's name is part of its Azure id: a renamed subnet is a new one, the old one "
        "deleted",
    },
    "azure-native:network:LoadBalancer": {
        "sku": "a load balancer's SKU is fixed at creation (Azure: Basic to Standard needs a new LB)",
    },
    "azure-native:authorization:RoleAssignment": {
        "principalId": "Azure refuses to update a role assignment (RoleAssignmentUpdateNotPermitted)",
        "roleDefinitionId": "Azure refuses to update a role assignment (RoleAssignmentUpdateNotPermitted)",
    },
    "azure-native:storage:StorageAccount": {
        "isHnsEnabled": "hierarchical namespace is chosen at creation (Azure Storage)",
    },
    "kubernetes:apps/v1:Deployment": {"spec.selector": "immutable in apps/v1 (Kubernetes API)"},
    "kubernetes:apps/v1:DaemonSet": {"spec.selector": "immutable in apps/v1 (Kubernetes API)"},
    "kubernetes:apps/v1:StatefulSet": {
        "spec.selector": "immutable in apps/v1 (Kubernetes API)",
        "spec.serviceName": "immutable (Kubernetes API, StatefulSet)",
        "spec.volumeClaimTemplates": "immutable (Kubernetes API, StatefulSet)",
    },
    "kubernetes:core/v1:Service": {"spec.clusterIP": "immutable once allocated (Kubernetes API, Service)"},
}
# Changes that update in place but do not reach what runs today; the report says so.
IN_PLACE_NOTES: dict[str, dict[str, str]] = {
    "azure-native:compute:VirtualMachineScaleSet": {
        "virtualMachineProfile": "a scale set model change reaches new instances only (upgrade policy Manual): "
        "running nodes keep the old model until they are reimaged or replaced",
    },
}
_KUBERNETES_IDENTITY = {
    "metadata.name": "a Kubernetes object's name is its identity",
    "metadata.namespace": "a Kubernetes object's namespace is part of its identity",
}
_AZURE_ID_INPUT = re.compile(r"[a-zA-Z]+Name|resourceGroupName|scope")


@dataclass(frozen=True)
class Replacement:
    path: str  # the changed input path
    reason: str


def is_azure_id_input(key: str) -> bool:
    """A top-level azure-native input that is a path segment of the resource's ARM id."""
    return _AZURE_ID_INPUT.fullmatch(key) is not None


def parse_path(path: str) -> list[str]:
    """``a.b[0]["x.y"]`` -> ``["a", "b", "0", "x.y"]`` (``[*]`` -> ``"*"``)."""
    tokens = []
    for match in re.finditer(r'\["((?:[^"\\]|\\.)*)"\]|\[(\*|\d+)\]|([^.\[\]]+)', path):
        quoted, index, plain = match.groups()
        tokens.append(quoted if quoted is not None else index if index is not None else plain)
    return tokens


def covers(pattern: str, path: str) -> bool:
    """True when ``path`` is ``pattern`` or lies beneath it (``*`` matches any one segment)."""
    wanted, actual = parse_path(pattern), parse_path(path)
    return len(wanted) <= len(actual) and all(w in ("*", a) for w, a in zip(wanted, actual, strict=False))


def replacements(typ: str, changed_paths: list[str], replace_on_changes: list[str]) -> list[Replacement]:
    """The changed paths (already stripped of ignored ones) that force a replacement, with why."""
    found = []
    for path in changed_paths:
        reason = _reason(typ, path, replace_on_changes)
        if reason is not None:
            found.append(Replacement(path, reason))
    return found


def in_place_note(typ: str, changed_paths: list[str]) -> str | None:
    for pattern, note in IN_PLACE_NOTES.get(typ, {}).items():
        if any(covers(pattern, path) for path in changed_paths):
            return note
    return None


def _reason(typ: str, path: str, replace_on_changes: list[str]) -> str | None:
    top = parse_path(path)[0]
    if typ.startswith("azure-native:"):
        if top == "location":
            return "Azure resources cannot move regions"
        if is_azure_id_input(top):
            return "part of the Azure resource id: a new id is a new resource"
    if typ.startswith(("tls:", "random:")):
        return "every input of this bridged provider forces a new resource"
    if typ.startswith("kubernetes:"):
        for pattern, reason in _KUBERNETES_IDENTITY.items():
            if covers(pattern, path):
                return reason
    for pattern, reason in CREATE_ONLY.get(typ, {}).items():
        if covers(pattern, path):
            return f"create-only: {reason}"
    for pattern in replace_on_changes:
        if covers(pattern, path) or pattern == "*":
            return f"the program asks for replacement on changes to {pattern} (replaceOnChanges)"
    return None
