"""What the typed SDK classes would have checked, checked against them: every resource the dev and prod
plans register through ``components.declare`` has a real type token, only property names (nested ones
too) that type accepts, the provider version its SDK package sends, and the secret properties its
typed class marks (components/declare.py says why the program does not use those classes)."""

from __future__ import annotations

import collections.abc
import importlib
import inspect
import re
import subprocess
import sys
import typing
from typing import Any

import pulumi
import pytest
from pulumi import _types

from components import declare
from plan.mocks import Registration
from plan.runner import run_declarations
from tests.helpers import recorded_stack_traces

PACKAGES = {
    "azure-native": "pulumi_azure_native",
    "kubernetes": "pulumi_kubernetes",
    "tls": "pulumi_tls",
    "random": "pulumi_random",
}


def typed_class(token: str) -> tuple[type, type]:
    """The typed resource class and its Args class for a type token."""
    if token.startswith("pulumi:providers:"):
        module = importlib.import_module(PACKAGES[token.split(":")[2]])
        return module.Provider, module.ProviderArgs
    package, module_path, kind = token.split(":")
    if package == "kubernetes":  # kubernetes:apps/v1:Deployment, kubernetes:rbac.authorization.k8s.io/v1:Role
        group, version = module_path.split("/")
        module_name = f"{PACKAGES[package]}.{group.split('.')[0]}.{version}"
    elif module_path.startswith("index"):  # tls:index/privateKey:PrivateKey
        module_name = PACKAGES[package]
    else:  # azure-native:network:VirtualNetwork
        module_name = f"{PACKAGES[package]}.{module_path}"
    resource_class = getattr(importlib.import_module(module_name), kind)
    # The resource's own Args class, from its defining module (``RouteInitArgs`` where the package has a
    # nested type ``RouteArgs`` too).
    module = importlib.import_module(resource_class.__module__)
    args_name = next(name for name in module.__all__ if name in (f"{kind}Args", f"{kind}InitArgs"))
    return resource_class, getattr(module, args_name)


# pulumi-kubernetes names the CRD schema extensions with underscores; manifests, the API server and the
# provider (which passes objects through as given, as it does for YAML) use the API's hyphens.
_SDK_NAMES = {
    f"x-kubernetes-{name}": f"x_kubernetes_{name.replace('-', '_')}"
    for name in (
        "embedded-resource",
        "int-or-string",
        "list-map-keys",
        "list-type",
        "map-type",
        "preserve-unknown-fields",
        "validations",
    )
}


def unknown_properties(value: Any, typ: Any, path: str) -> list[str]:
    """Paths in ``value`` that the SDK input type ``typ`` has no property for."""
    if typ is None:
        return []
    typ = _types.unwrap_type(typ)
    if typing.get_origin(typ) is typing.Union:  # Args class or its TypedDict twin: check against the class
        members = [member for member in typing.get_args(typ) if _types.is_input_type(member)]
        if len(members) > 1:  # a discriminated union (e.g. an image template's customizers): the best fit
            return min((unknown_properties(value, member, path) for member in members), key=len)
        typ = members[0] if members else typ
    if _types.is_input_type(typ) and isinstance(value, dict):
        names = set(_types.input_type_py_to_pulumi_names(typ).values())  # the provider's property names
        types = _types.input_type_types(typ)  # by those names, where the SDK can resolve the annotation
        found = []
        for key, item in value.items():
            name = _SDK_NAMES.get(key, key)
            where = f"{path}.{key}"
            found += [where] if name not in names else unknown_properties(item, types.get(name), where)
        return found
    origin, args = typing.get_origin(typ), typing.get_args(typ)
    if origin in (list, collections.abc.Sequence) and isinstance(value, list) and args:
        return [bad for i, item in enumerate(value) for bad in unknown_properties(item, args[0], f"{path}[{i}]")]
    if origin in (dict, collections.abc.Mapping) and isinstance(value, dict) and len(args) == 2:
        return [bad for key, item in value.items() for bad in unknown_properties(item, args[1], f"{path}.{key}")]
    return []


def typed_secret_properties(token: str) -> set[str]:
    """What the typed class keeps secret: its additional_secret_outputs and the inputs it wraps in
    Output.secret, read from its generated ``_internal_init``."""
    resource_class, args_class = typed_class(token)
    source = inspect.getsource(resource_class._internal_init)
    outputs = re.search(r"additional_secret_outputs=\[([^\]]*)\]", source)
    secret = set(re.findall(r'"([^"]+)"', outputs.group(1))) if outputs else set()
    py_to_pulumi = _types.input_type_py_to_pulumi_names(args_class)
    for py_name in re.findall(
        r'__props__\.__dict__\["(\w+)"\] = None if \w+ is None else pulumi\.Output\.secret', source
    ):
        secret.add(py_to_pulumi.get(py_name, py_name))
    return secret


def declared(*runs) -> list[Registration]:
    return [
        r
        for run in runs
        for r in run.registrations
        if r.custom and not r.type.startswith(("pulumi:pulumi:", "supercluster:"))
    ]


@pytest.fixture(scope="module")
def resources(dev_plan, prod_plan) -> list[Registration]:
    found = declared(dev_plan, prod_plan)
    assert {r.type.split(":")[0] for r in found} >= {"azure-native", "kubernetes", "tls", "random", "pulumi"}
    return found


@pytest.mark.slow  # seconds: every property of every resource against its type's schema
def test_every_property_the_program_sends_is_one_the_type_accepts(resources):
    problems = []
    for registration in resources:
        _, args_class = typed_class(registration.type)
        problems += [
            f"{registration.type} {registration.name}: {path}"
            for path in unknown_properties(registration.inputs, args_class, "")
        ]
    assert not problems, "properties the provider does not know:\n" + "\n".join(sorted(set(problems))[:20])


def test_the_check_catches_a_misspelt_and_a_misplaced_property():
    _, args_class = typed_class("azure-native:compute:VirtualMachineScaleSet")
    sent = {
        "vmScaleSetName": "x",
        "upgradePolicy": {"mode": "Manual", "automaticOSUpgrade": True},
        "virtualMachineProfile": {"osProfile": {"customdata": "x"}},
    }
    assert unknown_properties(sent, args_class, "") == [
        ".upgradePolicy.automaticOSUpgrade",
        ".virtualMachineProfile.osProfile.customdata",
    ]


def test_each_resource_names_the_provider_version_its_sdk_package_would(resources):
    for registration in resources:
        package = (
            registration.type.split(":")[2]
            if registration.type.startswith("pulumi:providers:")
            else registration.type.split(":")[0]
        )
        utilities = importlib.import_module(f"{PACKAGES[package]}._utilities")
        assert registration.options["version"] == utilities.get_version(), registration.name


def test_secret_properties_match_what_the_typed_classes_mark(resources):
    for token in sorted({r.type for r in resources if not r.type.startswith("pulumi:providers:")}):
        assert set(declare.SECRET_PROPERTIES.get(token, ())) == typed_secret_properties(token), token
    for registration in resources:
        assert set(registration.options["additionalSecretOutputs"]) == set(
            declare.SECRET_PROPERTIES.get(registration.type, ())
        ), registration.name


def test_secret_table_has_no_entry_the_program_does_not_use(resources):
    assert set(declare.SECRET_PROPERTIES) <= {r.type for r in resources}


def test_kubernetes_tokens_follow_the_manifest_api_version():
    def token_of(api_version: str, kind: str) -> str:
        run = run_declarations(
            lambda: declare.kubernetes("x", {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}})
        )
        return run.named("x").type

    assert token_of("v1", "ConfigMap") == "kubernetes:core/v1:ConfigMap"
    assert token_of("rbac.authorization.k8s.io/v1", "Role") == "kubernetes:rbac.authorization.k8s.io/v1:Role"


def test_absent_means_absent_and_undeclared_outputs_are_refused():
    def program():
        resource = declare.azure(
            "network:RouteTable",
            "routes",
            {
                "routeTableName": "r",
                "resourceGroupName": "g",
                "tags": None,
                "routes": [{"name": "a", "nextHopIpAddress": None}, None],
            },
            outputs=["name"],
        )
        resource.output("name")
        with pytest.raises(AttributeError, match="'etag' is neither an input nor a declared output"):
            resource.output("etag")

    run = run_declarations(program)
    assert run.named("routes").inputs == {"routeTableName": "r", "resourceGroupName": "g", "routes": [{"name": "a"}]}


def test_options_send_what_merging_the_defaults_would():
    """``_options`` builds from one copy what ``ResourceOptions.merge(_defaults(...), opts)`` built: each
    resource below is declared both ways and must be registered with the same options, dependencies and
    inputs, and the caller's options are left as they were."""
    token = "tls:index/privateKey:PrivateKey"
    secret = declare.SECRET_PROPERTIES[token]
    given: list[pulumi.ResourceOptions | None] = []

    def program():
        first = pulumi.CustomResource("random:index/randomId:RandomId", "first", {"byteLength": 8})
        given.extend(
            [
                None,
                pulumi.ResourceOptions(protect=True, ignore_changes=["algorithm"]),
                pulumi.ResourceOptions(depends_on=first, version="9.9.9"),
                pulumi.ResourceOptions(depends_on=[first], additional_secret_outputs=["publicKeyPem"]),
                pulumi.ResourceOptions(parent=first, delete_before_replace=True, retain_on_delete=True),
            ]
        )
        for index, opts in enumerate(given):
            declare.tls("PrivateKey", f"declared-{index}", {"algorithm": "ED25519"}, opts)
            merged = pulumi.ResourceOptions.merge(declare._defaults(token, secret), opts)
            pulumi.CustomResource(token, f"merged-{index}", {"algorithm": "ED25519"}, merged)

    run = run_declarations(program)
    for index in range(len(given)):
        declared, merged = run.named(f"declared-{index}"), run.named(f"merged-{index}")
        assert (declared.options, declared.dependencies, declared.inputs, declared.parent) == (
            merged.options,
            merged.dependencies,
            merged.inputs,
            merged.parent,
        ), index
    assert given[2] is not None and given[2].version == "9.9.9"
    assert given[3] is not None and given[3].additional_secret_outputs == ["publicKeyPem"]
    assert all(opts is None or opts.version in (None, "9.9.9") for opts in given)


@pytest.mark.slow  # a fresh interpreter plans dev, about a second: the slow stage
def test_the_program_imports_no_typed_sdk_module():
    """Importing them is the cost components/declare.py avoids; one stray import brings it back."""
    code = (
        "import sys; from plan.runner import run_program; from plan.stackfile import load_stack_config; "
        "run_program('dev', load_stack_config('dev', [])); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('pulumi_azure_native', 'pulumi_kubernetes', 'pulumi_tls', 'pulumi_random')))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]", loaded


def test_each_resource_is_recorded_at_the_line_that_declared_it():
    """The SDK records the stack below a resource's own constructor with every resource, and the engine keeps its
    first frame as the resource's source position: the caller's line, with no frame of ``declare`` between (each
    frame is turned into a source position for every resource of a plan)."""
    import inspect

    lines = []

    def declare_each_kind():
        here = inspect.currentframe()
        assert here is not None
        lines.append(here.f_lineno + 1)
        declare.azure("resources:ResourceGroup", "rg", {"location": "westus3"})
        lines.append(here.f_lineno + 1)
        declare.kubernetes("ns", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}})
        lines.append(here.f_lineno + 1)
        declare.tls("PrivateKey", "key", {"algorithm": "ED25519"})
        lines.append(here.f_lineno + 1)
        declare.random("RandomPassword", "password", {"length": 24})

    with recorded_stack_traces() as recorded:
        run_declarations(declare_each_kind)
    ours = [trace for trace in recorded if any(frame.pc.uri.endswith("/test_declare.py") for frame in trace.frames)]
    first = [(trace.frames[0].pc.uri.rsplit("/", 1)[-1], trace.frames[0].pc.line) for trace in ours]
    assert first == [("test_declare.py", line) for line in lines]
    assert not any(frame.pc.uri.endswith("/components/declare.py") for trace in recorded for frame in trace.frames)


def _plain_without_none(value: Any) -> Any:
    """What ``declare._without_none`` did before it told types apart by their exact type first."""
    if isinstance(value, collections.abc.Mapping):
        return {key: _plain_without_none(item) for key, item in value.items() if item is not None}
    if isinstance(value, (list, tuple)):
        return [_plain_without_none(item) for item in value if item is not None]
    return value


class _Pair(typing.NamedTuple):
    first: Any
    second: Any


class _Text(str):
    pass


def test_none_is_dropped_the_same_way_from_every_kind_of_value():
    import types

    from hypothesis import given, settings
    from hypothesis import strategies as st

    leaves = st.none() | st.booleans() | st.integers() | st.text(max_size=3) | st.builds(_Text, st.text(max_size=3))
    values = st.recursive(
        leaves,
        lambda children: (
            st.lists(children, max_size=3)
            | st.lists(children, max_size=3).map(tuple)
            | st.builds(_Pair, children, children)
            | st.dictionaries(st.text(max_size=3), children, max_size=3)
            | st.dictionaries(st.text(max_size=3), children, max_size=3).map(types.MappingProxyType)
        ),
        max_leaves=12,
    )

    @settings(max_examples=300, deadline=None)
    @given(values)
    def same(value):
        result = declare._without_none(value)
        assert result == _plain_without_none(value)
        assert type(result) is type(_plain_without_none(value))

    same()
