"""The alias transform drops exactly azure-native's versioned-type aliases and keeps the program's own."""

from __future__ import annotations

import pulumi
import pulumi_azure_native as azure

from components import aliases
from infra.plan.runner import run_declarations


def test_legacy_version_aliases_are_recognised():
    assert aliases.is_legacy_version_alias(pulumi.Alias(type_="azure-native:network/v20200601:VirtualNetwork"))
    assert aliases.is_legacy_version_alias(pulumi.Alias(type_="azure-native:network/v20150501preview:Subnet"))
    assert aliases.is_legacy_version_alias(pulumi.Alias(type_="azure-nextgen:network/latest:VirtualNetwork"))
    assert not aliases.is_legacy_version_alias(pulumi.Alias(name="old-name"))
    assert not aliases.is_legacy_version_alias(pulumi.Alias(type_="azure-native:network:VirtualNetwork"))
    # A rename the program declares must survive even if it also changes the type token.
    assert not aliases.is_legacy_version_alias(
        pulumi.Alias(name="old", type_="azure-native:network/v20200601:VirtualNetwork"))


def test_transform_keeps_program_aliases_and_drops_provider_ones():
    seen: dict[str, list] = {}

    def spy(args: pulumi.ResourceTransformationArgs):
        seen[args.name] = list(args.opts.aliases or [])
        return None

    def declare():
        aliases.register()
        pulumi.runtime.register_stack_transformation(spy)  # runs after the alias transform
        azure.network.VirtualNetwork("plain", resource_group_name="rg")
        azure.network.VirtualNetwork("renamed", resource_group_name="rg",
                                     opts=pulumi.ResourceOptions(aliases=[pulumi.Alias(name="old-vnet")]))

    run_declarations(declare)
    assert seen["plain"] == []
    assert [a.name for a in seen["renamed"]] == ["old-vnet"]


def test_without_the_transform_azure_native_declares_dozens_of_aliases():
    seen: dict[str, int] = {}

    def declare():
        pulumi.runtime.register_stack_transformation(
            lambda args: seen.setdefault(args.name, len(args.opts.aliases or [])) and None)
        azure.network.VirtualNetwork("plain", resource_group_name="rg")

    run_declarations(declare)
    assert seen["plain"] >= 50  # 60 in pulumi-azure-native 3.29: the cost the transform removes
