"""Azure's own validation, offline: every azure-native resource of the dev and prod plans against
Azure's published models of the same API version (tests/azure_models.py) and Azure's documented rules
across properties and resources (tests/azure_rules.py). docs/azure-validation.md lists both."""

from __future__ import annotations

import base64
import copy
import importlib
import inspect
import re
from collections.abc import Callable
from importlib import metadata
from typing import Any

import pytest

from tests.azure_models import MODELS, Violation, as_sent, check_inputs
from tests.azure_rules import RULES, Resource, check_rules, ssh_key_problem
from tests.helpers import PROJECT_DIR


def azure_resources(run) -> list[Resource]:
    return [(r.type, r.name, as_sent(r.inputs)) for r in run.registrations if r.type.startswith("azure-native:")]


@pytest.fixture(scope="module", params=["dev", "prod"])
def stack_resources(request) -> list[Resource]:
    return azure_resources(request.getfixturevalue(f"{request.param}_plan"))


@pytest.fixture(scope="module")
def dev_resources(dev_plan) -> list[Resource]:
    return azure_resources(dev_plan)


def pulumi_api_version(token: str) -> str:
    """The API version the pinned pulumi-azure-native sends for a type (its class says which)."""
    _, module, kind = token.split(":")
    source = inspect.getsource(getattr(importlib.import_module(f"pulumi_azure_native.{module}"), kind))
    return re.search(r"Azure REST API version (\S+?)\.?\s", source).group(1)


def test_every_azure_resource_of_the_plans_has_its_azure_model(stack_resources):
    assert {token for token, _, _ in stack_resources} <= set(MODELS), "a type without Azure's model in MODELS"


@pytest.mark.parametrize("token", sorted(MODELS))
def test_each_model_is_of_the_api_version_pulumi_sends(token):
    spec = MODELS[token]
    metadata.version(spec.distribution)  # installed: requirements.in pins it
    if spec.api_version:  # no SDK release carries pulumi's version: the nearest, said so and why
        assert spec.sdk_api_version == spec.api_version != pulumi_api_version(token) and spec.why
    else:
        assert spec.sdk_api_version == pulumi_api_version(token)


def test_azure_accepts_every_resource_the_plan_declares(stack_resources):
    found = [f"{name} ({token}): {v}" for token, name, inputs in stack_resources for v in check_inputs(token, inputs)]
    found += [str(v) for v in check_rules(stack_resources)]
    assert not found, "\n".join(found[:40])


# --------------------------------------------------------------------------- seeded violations


def _first(resources: list[Resource], token: str) -> tuple[str, dict[str, Any]]:
    return next((name, copy.deepcopy(inputs)) for t, name, inputs in resources if t == f"azure-native:{token}")


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Sets ``a.b[0].c`` in a resource's inputs."""

    def apply(inputs: dict[str, Any]) -> None:
        *parents, leaf = re.findall(r"[^.\[\]]+", path)
        node: Any = inputs
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[int(leaf) if leaf.isdigit() else leaf] = value

    return apply


def _delete(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda inputs: inputs.pop(key)


MODEL_SEEDS = {
    "required": ("storage:StorageAccount", _delete("sku"), "sku"),
    "readonly": ("network:VirtualNetwork", _set("provisioningState", "Succeeded"), "provisioningState"),
    "length": ("containerregistry:CacheRule", _set("cacheRuleName", "k8s"), "cacheRuleName"),
    "pattern": ("containerregistry:Registry", _set("registryName", "dev-registry"), "registryName"),
    "range": ("storage:BlobServiceProperties", _set("deleteRetentionPolicy.days", 400), "deleteRetentionPolicy.days"),
    "enum": ("network:NetworkSecurityGroup", _set("securityRules[0].access", "Maybe"), "securityRules[0].access"),
    "type": ("compute:VirtualMachineScaleSet", _set("sku.capacity", "3"), "sku.capacity"),
    "unknown": (
        "compute:VirtualMachineScaleSet",
        _set("virtualMachineProfile.osProfile.linuxConfiguration.disablePasswordAuth", True),
        "virtualMachineProfile.osProfile.linuxConfiguration.disablePasswordAuth",
    ),
}


@pytest.mark.parametrize("kind", sorted(MODEL_SEEDS))
def test_a_seeded_violation_of_each_kind_is_caught(dev_resources, kind):
    token, mutate, path = MODEL_SEEDS[kind]
    _, inputs = _first(dev_resources, token)
    assert not check_inputs(f"azure-native:{token}", inputs)
    mutate(inputs)
    found = check_inputs(f"azure-native:{token}", inputs)
    assert [(v.kind, v.path) for v in found] == [(kind, path)], found


def test_an_unknown_top_level_property_is_caught_with_what_the_model_has(dev_resources):
    _, inputs = _first(dev_resources, "network:VirtualNetwork")
    inputs["adressSpace"] = inputs.pop("addressSpace")
    found = check_inputs("azure-native:network:VirtualNetwork", inputs)
    assert [(v.kind, v.path) for v in found] == [("unknown", "adressSpace")]
    assert "addressSpace" in found[0].message


def _two_primaries(resources: list[Resource]) -> None:
    _, _, scale_set = next(r for r in resources if r[0] == "azure-native:compute:VirtualMachineScaleSet")
    scale_set["virtualMachineProfile"]["networkProfile"]["networkInterfaceConfigurations"][0]["ipConfigurations"][1][
        "primary"
    ] = True


def _subnet_outside(resources: list[Resource]) -> None:
    vnet = next(i for t, _, i in resources if t == "azure-native:network:VirtualNetwork" and i.get("subnets"))
    vnet["subnets"][0]["addressPrefix"] = "192.168.0.0/24"


def _duplicate_priority(resources: list[Resource]) -> None:
    rules = next(
        i
        for t, _, i in resources
        if t == "azure-native:network:NetworkSecurityGroup" and len(i.get("securityRules", [])) > 1
    )["securityRules"]
    rules[1]["priority"] = rules[0]["priority"]


def _big_prefix(resources: list[Resource]) -> None:
    next(i for t, _, i in resources if t == "azure-native:network:PublicIPPrefix")["prefixLength"] = 27


def _crowded_placement_group(resources: list[Resource]) -> None:
    scale_set = next(i for t, _, i in resources if t == "azure-native:compute:VirtualMachineScaleSet")
    scale_set["singlePlacementGroup"], scale_set["sku"]["capacity"] = True, 101


def _rolling_policy_in_manual_mode(resources: list[Resource]) -> None:
    scale_set = next(i for t, _, i in resources if t == "azure-native:compute:VirtualMachineScaleSet")
    scale_set["upgradePolicy"] = {"mode": "Manual", "rollingUpgradePolicy": {"maxBatchInstancePercent": 20}}


def _ephemeral_read_write(resources: list[Resource]) -> None:
    disk = next(
        i["virtualMachineProfile"]["storageProfile"]["osDisk"]
        for t, _, i in resources
        if t == "azure-native:compute:VirtualMachineScaleSet"
        and "diffDiskSettings" in i["virtualMachineProfile"]["storageProfile"]["osDisk"]
    )
    disk["caching"] = "ReadWrite"


def _ha_ports_on_one_port(resources: list[Resource]) -> None:
    balancer = next(
        i
        for t, _, i in resources
        if t == "azure-native:network:LoadBalancer"
        and any(r.get("protocol") == "All" for r in i.get("loadBalancingRules", []))
    )
    balancer["loadBalancingRules"][0]["backendPort"] = 443


def _nat_gateway_shared(resources: list[Resource]) -> None:
    vnets = [i for t, _, i in resources if t == "azure-native:network:VirtualNetwork" and i.get("subnets")]
    vnets[1]["subnets"][0]["natGateway"] = dict(vnets[0]["subnets"][0]["natGateway"])


def _placeholder_key(resources: list[Resource]) -> None:
    vm = next(i for t, _, i in resources if t == "azure-native:compute:VirtualMachine")
    vm["osProfile"]["linuxConfiguration"]["ssh"]["publicKeys"][0]["keyData"] = (
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIProdPlatformTeamBreakGlassKeyReplaceMe000000 platform@supercluster"
    )


def _short_soft_delete(resources: list[Resource]) -> None:
    next(i for t, _, i in resources if t == "azure-native:keyvault:Vault")["properties"][
        "softDeleteRetentionInDays"
    ] = 3


def _too_many_pod_ips(resources: list[Resource]) -> None:
    scale_set = next(i for t, _, i in resources if t == "azure-native:compute:VirtualMachineScaleSet")
    configurations = scale_set["virtualMachineProfile"]["networkProfile"]["networkInterfaceConfigurations"][0]
    configurations["ipConfigurations"] += [
        {"name": f"extra{i}", "subnet": configurations["ipConfigurations"][0]["subnet"]}
        for i in range(257 - len(configurations["ipConfigurations"]))
    ]


def _big_custom_data(resources: list[Resource]) -> None:
    vm = next(i for t, _, i in resources if t == "azure-native:compute:VirtualMachine")
    vm["osProfile"]["customData"] = base64.b64encode(b"#" * 65536).decode()


def _fifty_one_tags(resources: list[Resource]) -> None:
    vnet = next(i for t, _, i in resources if t == "azure-native:network:VirtualNetwork")
    vnet["tags"] = {f"t{i}": "x" for i in range(51)}


RULE_SEEDS = {
    "ip-configurations-per-nic": _too_many_pod_ips,
    "custom-data": _big_custom_data,
    "tags": _fifty_one_tags,
    "primary-ip-configuration": _two_primaries,
    "subnet-in-vnet": _subnet_outside,
    "nsg-priority": _duplicate_priority,
    "public-ip-prefix-size": _big_prefix,
    "single-placement-group": _crowded_placement_group,
    "upgrade-policy": _rolling_policy_in_manual_mode,
    "ephemeral-os-disk": _ephemeral_read_write,
    "ha-ports": _ha_ports_on_one_port,
    "nat-gateway-one-vnet": _nat_gateway_shared,
    "ssh-public-key": _placeholder_key,
    "key-vault-soft-delete": _short_soft_delete,
}


def test_every_rule_has_a_seed_and_a_source():
    assert set(RULE_SEEDS) == {rule.name for rule in RULES}
    assert all(rule.source.startswith("https://learn.microsoft.com/") for rule in RULES)


@pytest.mark.parametrize("rule", sorted(RULE_SEEDS))
def test_a_seeded_break_of_each_rule_is_caught(dev_plan, rule):
    resources = azure_resources(dev_plan)  # a fresh copy: seeds change it
    RULE_SEEDS[rule](resources)
    found = check_rules(resources)
    assert found and {v.kind for v in found} == {rule}, found


@pytest.mark.parametrize(
    "key, problem",
    [
        ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDevOnlyKeyReplaceWithYourOwnKeyDevOnlyKey0 x", "not valid base64"),
        (
            "ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAIK6o7lda3/PA3tpeQIftUOcZiIoiK3/2tDOX8dmJZESx x",
            "does not hold a ssh-rsa key",
        ),
        ("ecdsa-sha2-nistp256 AAAA x", "type ssh-ed25519 or ssh-rsa"),
        ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK6o7lda3/PA3tpeQIftUOcZiIoiK3/2tDOX8dmJZESx x", None),
    ],
)
def test_ssh_keys_azure_refuses(key, problem):
    found = ssh_key_problem(key)
    assert (found is None) if problem is None else (problem in found)


def test_a_short_rsa_key_is_refused():
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    def openssh(bits: int) -> str:
        key = rsa.generate_private_key(public_exponent=65537, key_size=bits).public_key()
        return key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()

    assert "1024 bits" in ssh_key_problem(openssh(1024))
    assert ssh_key_problem(openssh(2048)) is None


# --------------------------------------------------------------------------- the documentation


def documented_rows(start: str) -> list[str]:
    page = (PROJECT_DIR / "docs" / "azure-validation.md").read_text()
    return page.split(f"<!-- {start}:start -->\n")[1].split(f"<!-- {start}:end -->")[0].strip().splitlines()[2:]


def model_rows() -> list[str]:
    rows = []
    for token, spec in sorted(MODELS.items()):
        version = spec.sdk_api_version + (f" (pulumi: {pulumi_api_version(token)}; {spec.why})" if spec.why else "")
        rows.append(f"| `{token}` | {version} | `{spec.distribution}` | `{spec.models}.{spec.model}` |")
    return rows


def test_the_documented_models_are_the_ones_checked():
    assert documented_rows("models") == model_rows()


def test_the_documented_rules_are_the_ones_checked():
    assert documented_rows("rules") == [f"| `{r.name}` | {r.what} | {r.source} |" for r in RULES]


def test_the_pinned_packages_are_the_ones_installed():
    pins = dict(re.findall(r"^(azure-mgmt-[a-z]+)==(\S+)$", (PROJECT_DIR / "requirements.in").read_text(), re.M))
    assert set(pins) == {spec.distribution for spec in MODELS.values()}
    assert all(metadata.version(name) == version for name, version in pins.items()), pins


def test_violation_reads_as_one_line():
    assert (
        str(Violation("length", "cacheRuleName", "'k8s' is 3 characters"))
        == "cacheRuleName: length: 'k8s' is 3 characters"
    )


# --------------------------------------------------------------------------- names, as the plan sends them

NAMED = {  # type: [(input path, its rule in infra.config.naming.NAME_RULES)]
    "resources:ResourceGroup": [("resourceGroupName", "resource group")],
    "keyvault:Vault": [("vaultName", "key vault")],
    "keyvault:Secret": [("secretName", "key vault secret")],
    "storage:BlobContainer": [("containerName", "blob container")],
    "privatedns:VirtualNetworkLink": [("virtualNetworkLinkName", "network resource")],
    "network:Subnet": [("subnetName", "network resource")],
    "storage:StorageAccount": [("accountName", "storage account")],
    "containerregistry:Registry": [("registryName", "container registry")],
    "containerregistry:CacheRule": [("cacheRuleName", "registry cache rule")],
    "managedidentity:UserAssignedIdentity": [("resourceName", "managed identity")],
    "network:VirtualNetwork": [("virtualNetworkName", "virtual network")],
    "network:NetworkSecurityGroup": [("networkSecurityGroupName", "network resource")],
    "network:NatGateway": [("natGatewayName", "network resource")],
    "network:PublicIPPrefix": [("publicIpPrefixName", "network resource")],
    "network:RouteTable": [("routeTableName", "network resource")],
    "network:Route": [("routeName", "network resource")],
    "network:LoadBalancer": [("loadBalancerName", "network resource")],
    "network:NetworkInterface": [("networkInterfaceName", "network resource")],
    "network:VirtualNetworkPeering": [("virtualNetworkPeeringName", "network resource")],
    "compute:VirtualMachine": [("vmName", "virtual machine"), ("osProfile.computerName", "virtual machine")],
    "compute:VirtualMachineScaleSet": [
        ("vmScaleSetName", "scale set"),
        ("virtualMachineProfile.osProfile.computerNamePrefix", "computer name prefix"),
    ],
    "compute:Gallery": [("galleryName", "compute gallery")],
    "compute:GalleryImage": [("galleryImageName", "gallery image")],
    "virtualmachineimages:VirtualMachineImageTemplate": [("imageTemplateName", "image template")],
}


def test_every_name_the_plan_sends_obeys_azures_naming_rule(stack_resources):
    from infra.config.naming import NAME_RULES

    checked, problems = set(), []
    for token, name, inputs in stack_resources:
        for path, rule in NAMED.get(token.removeprefix("azure-native:"), []):
            value: Any = inputs
            for part in path.split("."):
                value = value.get(part) if isinstance(value, dict) else None
            if isinstance(value, str):
                checked.add(token)
                problem = NAME_RULES[rule].problem(value)
                if problem:
                    problems.append(f"{name}.{path}: {problem}")
        for i, subnet in enumerate(inputs.get("subnets", []) if token == "azure-native:network:VirtualNetwork" else []):
            problem = NAME_RULES["network resource"].problem(subnet.get("name", ""))
            if problem:
                problems.append(f"{name}.subnets[{i}].name: {problem}")
    assert not problems, problems
    present = {token for token, _, _ in stack_resources}
    assert checked == {f"azure-native:{t}" for t in NAMED} & present, "a name input the plan no longer sends"


def test_the_documented_naming_rules_are_the_ones_checked():
    from infra.config.naming import NAME_RULES

    assert documented_rows("names") == [
        f"| {key} | `{r.entity}` | {r.min_length}-{r.max_length} | "
        f"{r.accepted.replace('|', chr(92) + '|')} | {r.source} |"
        for key, r in NAME_RULES.items()
    ]
