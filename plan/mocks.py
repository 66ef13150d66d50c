"""Pulumi mocks that stand in for the engine and the providers, and record what the program asks for.

``PlanMocks`` answers each registration the way the provider would (ids, computed
outputs such as certificate PEMs); ``RecordingMonitor`` keeps every RegisterResource
request with its options, so the plan and the tests see exactly what ``pulumi up``
would send to the engine.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import pulumi
from google.protobuf import struct_pb2
from pulumi.runtime import mocks
from pulumi.runtime.proto import resource_pb2

SECRET = "[secret]"
# Wire-format signatures of the Pulumi property protocol (sdk/python/lib/pulumi/runtime/rpc.py).
_SIG_KEY = "4dabf18193072939515e22adb298388d"
_SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
_RESOURCE_SIG = "5cf8f73096256a8f31e491e813e4eb8e"
_OUTPUT_SIG = "d0e6a833031e9bbcd3f4e8bde6ca49a4"
_UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"

# Where a VM's or scale set's customData (base64 cloud-init) sits in its inputs (Azure's compute API).
VM_TYPES = {
    "azure-native:compute:VirtualMachine": ("osProfile", "customData"),
    "azure-native:compute:VirtualMachineScaleSet": ("virtualMachineProfile", "osProfile", "customData"),
}

MOCK_SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"
MOCK_TENANT = "11111111-1111-1111-1111-111111111111"


def plain(value: Any) -> Any:
    """Wire-format JSON -> plain JSON, secrets replaced by ``"[secret]"``, unknowns by ``"[unknown]"``."""
    if isinstance(value, dict):
        signature = value.get(_SIG_KEY)
        if signature == _SECRET_SIG:
            return masked(value.get("value"))
        if signature == _RESOURCE_SIG:
            return value.get("urn")
        if signature == _OUTPUT_SIG:
            return masked(value.get("value")) if value.get("secret") else plain(value.get("value"))
        return {k: plain(value[k]) for k in sorted(value)}  # protobuf map order varies between runs
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)  # the wire format carries every number as a double
    if value == _UNKNOWN:
        return "[unknown]"
    return value


def masked(value: Any) -> Any:
    """A secret with each value masked and its shape kept: a Secret's ``stringData`` stays an object of
    strings (its keys are not secret), so the planned object is still one Kubernetes accepts."""
    if isinstance(value, dict) and value.get(_SIG_KEY) is None:
        return {k: masked(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [masked(v) for v in value]
    return SECRET


def struct_value(struct: struct_pb2.Struct) -> dict[str, Any]:
    """A protobuf Struct as Python, in its wire form (secrets still marked where they are): what
    ``json_format.MessageToDict`` gives, from the maps' own C iteration instead of its generic walk."""
    return {key: _value(value) for key, value in struct.fields.items()}


def _value(value: struct_pb2.Value) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return value.string_value
    if kind == "struct_value":
        return {key: _value(item) for key, item in value.struct_value.fields.items()}
    if kind == "list_value":
        return [_value(item) for item in value.list_value.values]
    if kind == "bool_value":
        return value.bool_value
    if kind == "number_value":
        return value.number_value
    return None


@dataclass
class Registration:
    urn: str
    id: str
    type: str
    name: str
    parent: str
    custom: bool
    inputs: dict[str, Any]
    options: dict[str, Any]
    dependencies: list[str]
    property_dependencies: dict[str, list[str]] = field(default_factory=dict)
    provider: str = ""  # "<provider urn>::<id>" when the resource names an explicit provider

    def as_json(self) -> dict[str, Any]:
        return {
            "urn": self.urn,
            "id": self.id,
            "type": self.type,
            "name": self.name,
            "parent": self.parent,
            "inputs": self.inputs,
            "options": self.options,
            "dependencies": self.dependencies,
        }


class PlanMocks(pulumi.runtime.Mocks):
    """Provider stand-ins. ``stack_outputs`` answers StackReferences by stack name."""

    def __init__(self, stack_outputs: dict[str, dict[str, Any]] | None = None) -> None:
        self.stack_outputs = stack_outputs or {}
        # Every value handed out that the real provider marks secret (private keys, passwords, random
        # bytes): the plan's secret scan looks for each of them, verbatim, in every file it writes.
        self.secret_values: set[str] = set()

    def new_resource(self, args: mocks.MockResourceArgs) -> tuple[str, dict]:
        """The resource's id and what the provider computes. Inputs are not echoed back: the SDK keeps
        every input the engine returns no value for (``rpc.resolve_outputs``, outside previews), so
        each output still resolves to its input, without the whole state crossing the wire twice."""
        state: dict[str, Any] = {}
        typ, name = args.typ, args.name
        if typ == "pulumi:pulumi:StackReference":
            stack_name = args.inputs.get("name") or name
            return stack_name, {
                "name": stack_name,
                "outputs": self.stack_outputs.get(stack_name, {}),
                "secretOutputNames": [],
            }
        if typ.startswith("tls:"):
            outputs = _tls_outputs(typ, name)
            state.update(outputs)
            self.secret_values.update(v for k, v in outputs.items() if k.startswith("privateKey"))
        elif typ.startswith("random:"):
            length = int(args.inputs.get("length", 32))
            state["result"] = hashlib.sha256(name.encode()).hexdigest()[:length]
            if typ.endswith(":RandomPassword"):
                # bcrypt's shape ($2a$, cost, 53 characters of salt and hash), made from the name like the result.
                state["bcryptHash"] = "$2a$10$" + hashlib.sha256(f"bcrypt-{name}".encode()).hexdigest()[:53]
                self.secret_values.update((state["result"], state["bcryptHash"]))
            if typ.endswith(":RandomBytes"):
                raw = hashlib.sha256(name.encode()).digest()[:length]
                state.update(base64=base64.b64encode(raw).decode(), hex=raw.hex())
                self.secret_values.update((state["base64"], state["hex"]))
        elif typ.startswith("azure-native:"):
            state["name"] = args.inputs.get("name") or _azure_name(typ, args.inputs, name)
            state.update(_azure_outputs(typ, {**args.inputs, **state}))
        resource_id = (
            _azure_id(typ, {**args.inputs, **state}, name) if typ.startswith("azure-native:") else f"{name}-id"
        )
        return resource_id, state

    def call(self, args: mocks.MockCallArgs) -> dict:
        if args.token == "azure-native:authorization:getClientConfig":
            return {
                "clientId": "mock-client",
                "objectId": "mock-object",
                "subscriptionId": MOCK_SUBSCRIPTION,
                "tenantId": MOCK_TENANT,
            }
        if args.token == "pulumi:pulumi:readStackOutputs":  # components.stack_config.previous_outputs
            name = args.args.get("name")
            return {"name": name, "outputs": self.stack_outputs.get(name, {}), "secretOutputNames": []}
        return {}


def _tls_outputs(typ: str, name: str) -> dict[str, str]:
    if typ.endswith(":PrivateKey"):
        return {
            "privateKeyPem": f"-----BEGIN PRIVATE KEY-----\nMOCK-{name}\n-----END PRIVATE KEY-----\n",
            "privateKeyPemPkcs8": f"-----BEGIN PRIVATE KEY-----\nMOCK-{name}\n-----END PRIVATE KEY-----\n",
            "publicKeyPem": f"-----BEGIN PUBLIC KEY-----\nMOCK-{name}\n-----END PUBLIC KEY-----\n",
            "publicKeyOpenssh": f"ssh-ed25519 MOCK{name}",
        }
    if typ.endswith(":CertRequest"):
        return {
            "certRequestPem": f"-----BEGIN CERTIFICATE REQUEST-----\nMOCK-{name}\n-----END CERTIFICATE REQUEST-----\n"
        }
    return {"certPem": f"-----BEGIN CERTIFICATE-----\nMOCK-{name}\n-----END CERTIFICATE-----\n"}


# Azure-native resources take their physical name from one input (resourceGroupName for a group,
# vmName for a VM, ...). The mock reports it as `name`, like the provider does; a child's own name
# (a blob container's) comes before its parent's (the storage account's).
_NAME_INPUTS = (
    "resourceName",
    "vmName",
    "vmScaleSetName",
    "virtualNetworkName",
    "subnetName",
    "networkSecurityGroupName",
    "networkInterfaceName",
    "loadBalancerName",
    "routeTableName",
    "natGatewayName",
    "publicIpAddressName",
    "containerName",
    "accountName",
    "vaultName",
    "secretName",
    "privateEndpointName",
    "privateZoneName",
    "virtualNetworkPeeringName",
    "virtualNetworkLinkName",
    "roleAssignmentName",
    "registryName",
    "managementPolicyName",
    "blobServicesName",
    "publicIpPrefixName",
    "diskName",
)


def _azure_name(typ: str, inputs: dict[str, Any], logical: str) -> str:
    kind = typ.rsplit(":", 1)[-1]
    own = f"{kind[0].lower()}{kind[1:]}Name"  # Subnet -> subnetName, before virtualNetworkName
    if isinstance(inputs.get(own), str):
        return inputs[own]
    for key in _NAME_INPUTS:
        if isinstance(inputs.get(key), str):
            return inputs[key]
    return logical


def _azure_outputs(typ: str, state: dict[str, Any]) -> dict[str, Any]:
    identity = state.get("identity")
    if isinstance(identity, dict) and isinstance(identity.get("userAssignedIdentities"), list):
        # Requests list the identity ids; Azure answers with a map of id -> {principalId, clientId}.
        return {
            "identity": {
                **identity,
                "userAssignedIdentities": {identity_id: {} for identity_id in identity["userAssignedIdentities"]},
            }
        }
    if typ.endswith(":UserAssignedIdentity"):
        digest = hashlib.sha256(state["name"].encode()).hexdigest()
        return {
            "principalId": f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}",
            "clientId": f"{digest[32:40]}-{digest[40:44]}-{digest[44:48]}-{digest[48:52]}-{digest[52:64]}",
            "tenantId": MOCK_TENANT,
        }
    if typ.endswith(":Vault"):
        return {"properties": {**state.get("properties", {}), "vaultUri": f"https://{state['name']}.vault.azure.net/"}}
    if typ.endswith(":PublicIPPrefix"):
        # Addresses from TEST-NET-3 (RFC 5737), which no real prefix ever has.
        offset = int(hashlib.sha256(state["name"].encode()).hexdigest(), 16) % 16 * 16
        return {"ipPrefix": f"203.0.113.{offset}/{int(state.get('prefixLength', 28))}"}
    if typ == "azure-native:keyvault:Secret":
        # What the apiservers' readiness gates track: a new value is a new version.
        properties = state.get("properties", {})  # its value arrives marked secret, and stays so
        uri = f"https://{state['vaultName']}.vault.azure.net/secrets/{state['name']}"
        version = hashlib.sha256(json.dumps(properties, sort_keys=True).encode()).hexdigest()[:32]
        return {"properties": {**properties, "secretUri": uri, "secretUriWithVersion": f"{uri}/{version}"}}
    if typ.endswith(":StorageAccount"):
        return {"primaryEndpoints": {"blob": f"https://{state['name']}.blob.core.windows.net/"}}
    return {}


_PROVIDER_NAMESPACES = {
    "resources": "Microsoft.Resources",
    "network": "Microsoft.Network",
    "compute": "Microsoft.Compute",
    "storage": "Microsoft.Storage",
    "keyvault": "Microsoft.KeyVault",
    "managedidentity": "Microsoft.ManagedIdentity",
    "authorization": "Microsoft.Authorization",
    "containerregistry": "Microsoft.ContainerRegistry",
    "privatedns": "Microsoft.Network",
}


def _azure_id(typ: str, state: dict[str, Any], logical: str) -> str:
    _, module_path, kind = typ.split(":")
    module = module_path.split("/")[0]
    if kind == "ResourceGroup":
        return f"/subscriptions/{MOCK_SUBSCRIPTION}/resourceGroups/{state['name']}"
    group = state.get("resourceGroupName", "mock-rg")
    namespace = _PROVIDER_NAMESPACES.get(module, f"Microsoft.{module.capitalize()}")
    return (
        f"/subscriptions/{MOCK_SUBSCRIPTION}/resourceGroups/{group}/providers/{namespace}/"
        f"{kind[0].lower()}{kind[1:]}s/{state.get('name', logical)}"
    )


class RecordingMonitor(mocks.MockMonitor):
    """A MockMonitor that keeps each RegisterResource request, in order, with its options."""

    def __init__(self, plan_mocks: PlanMocks) -> None:
        super().__init__(plan_mocks)
        self.registrations: list[Registration] = []
        self.by_urn: dict[str, Registration] = {}

    def RegisterResource(self, request):  # noqa: N802 - gRPC method name
        """``MockMonitor.RegisterResource``, minus two round trips: the request is decoded once (its wire
        form, secrets still marked where they are, is what the mocks read and the plan records), and
        the answer is encoded straight into a Struct (mock state is plain JSON) instead of through an
        event loop per call, whose select() hands the GIL away on every registration."""
        if request.type == "pulumi:pulumi:Stack":
            return super().RegisterResource(request)
        wire = struct_value(request.object)
        resource_id, state = self.mocks.new_resource(
            mocks.MockResourceArgs(
                typ=request.type,
                name=request.name,
                inputs=wire,
                provider=request.provider,
                resource_id=request.importId,
                custom=request.custom or False,
            )
        )
        urn = self.make_urn(request.parent, request.type, request.name)
        self.resources[urn] = mocks.MockMonitor.ResourceRegistration(urn, resource_id, state)
        answer = struct_pb2.Struct()
        answer.update(state)
        response = resource_pb2.RegisterResourceResponse(urn=urn, id=resource_id, object=answer)
        inputs = plain(wire)
        property_dependencies = {k: list(v.urns) for k, v in request.propertyDependencies.items()}
        from_inputs = {urn for urns in property_dependencies.values() for urn in urns}
        options = {
            "protect": bool(request.protect),
            "ignoreChanges": list(request.ignoreChanges),
            # The request merges explicit dependsOn with input dependencies; what no input explains is dependsOn.
            "dependsOn": sorted(set(request.dependencies) - from_inputs),
            "deleteBeforeReplace": bool(request.deleteBeforeReplace),
            "retainOnDelete": bool(request.retainOnDelete),
            "replaceOnChanges": list(request.replaceOnChanges),
            # URNs this resource was known by: a rename or re-parent that keeps the resource.
            "aliases": self._alias_urns(request),
            # The provider plugin the engine loads for it, and the outputs it stores encrypted.
            "version": request.version,
            "additionalSecretOutputs": sorted(request.additionalSecretOutputs),
        }
        registration = Registration(
            urn=response.urn,
            id=response.id,
            type=request.type,
            name=request.name,
            parent=request.parent,
            custom=bool(request.custom),
            inputs=inputs,
            options=options,
            dependencies=sorted(set(request.dependencies)),
            property_dependencies=property_dependencies,
            provider=request.provider,
        )
        self.registrations.append(registration)
        self.by_urn[registration.urn] = registration
        return response

    def _alias_urns(self, request) -> list[str]:
        """The old URNs the program's aliases stand for, built the way this monitor builds URNs."""
        urns = set(request.aliasURNs)
        for alias in request.aliases:
            if alias.WhichOneof("alias") == "urn":
                urns.add(alias.urn)
                continue
            spec = alias.spec
            parent = request.parent
            if spec.noParent:
                parent = self.make_urn("", "pulumi:pulumi:Stack", f"{pulumi.get_project()}-{pulumi.get_stack()}")
            elif spec.parentUrn:
                parent = spec.parentUrn
            urns.add(self.make_urn(parent, spec.type or request.type, spec.name or request.name))
        return sorted(urns)
