"""Provider resources declared by type token, with the provider's own (camelCase) property names.

Why not the typed SDK classes (``pulumi_azure_native.network.VirtualNetwork(...)``)? They cost
more than the whole rest of a plan: importing the modules a cluster needs takes 1.2 s (azure-native's
network module alone defines thousands of input classes), and registering through them walks type
metadata for every property of every resource. Every `pulumi preview` on a pull request, every `up`
and every test pays it; measured in docs/performance.md. What a typed class sends the engine is
no more than what this module sends: the type token, the inputs under the provider's property names,
the provider version to load, and which properties to keep secret. So the program states exactly
that, in the names Azure's and Kubernetes' own API references use.

What the typed classes checked at construction is checked by tests/components/test_declare.py
against the installed SDKs, for every resource the dev and prod plans register: the type token
exists, every input property (nested ones too) is one the type accepts, and the version and the
secret properties are what the typed class would send. The SDK packages stay in requirements.in:
their versions pin the provider plugins, and the Pulumi CLI installs the plugins their metadata names.
Typed classes also add aliases for older API versions of a type; this program has only ever used the
current tokens, so there are none to carry (an object moved to another API version must declare its
alias itself).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping, Sequence
from importlib.metadata import version
from typing import TYPE_CHECKING, Any, ClassVar

import pulumi

# The SDK package whose version names each provider's plugin (requirements.in pins them).
SDK_PACKAGES = {
    "azure-native": "pulumi-azure-native",
    "kubernetes": "pulumi-kubernetes",
    "tls": "pulumi-tls",
    "random": "pulumi-random",
}


@functools.cache
def provider_version(package: str) -> str:
    """The plugin version a package's resources are served by: its SDK package's, as the typed classes
    send it (``_utilities.get_version()``). Read from the installed metadata once, when first needed."""
    return version(SDK_PACKAGES[package])


# Properties the typed classes keep secret, as inputs (wrapped in Output.secret) and as outputs
# (additional_secret_outputs). tests/components/test_declare.py compares this with the installed SDKs.
SECRET_PROPERTIES: dict[str, tuple[str, ...]] = {
    "tls:index/privateKey:PrivateKey": ("privateKeyOpenssh", "privateKeyPem", "privateKeyPemPkcs8"),
    "tls:index/certRequest:CertRequest": ("privateKeyPem", "privateKeyPemWo"),
    "tls:index/selfSignedCert:SelfSignedCert": ("privateKeyPem", "privateKeyPemWo"),
    "tls:index/locallySignedCert:LocallySignedCert": ("caPrivateKeyPem", "caPrivateKeyPemWo"),
    "random:index/randomPassword:RandomPassword": ("bcryptHash", "result"),
    "random:index/randomBytes:RandomBytes": ("base64", "hex"),
    "kubernetes:core/v1:Secret": ("data", "stringData"),
}


class Declared(pulumi.CustomResource):
    """A resource registered by type token (``kind``, in the subclasses their provider's own kinds). ``outputs``
    names the provider-computed properties the program reads (``output("principalId")``); ``id`` and ``urn``
    are always there.

    Each kind of resource the program declares (``azure``, ``kubernetes``, ``tls``, ``random``) is a class
    whose constructor hands its registration to ``pulumi.CustomResource.__init__`` itself: the SDK records the
    call stack below the resource's own constructor with every resource and turns each frame into a source
    position (``pulumi.runtime.resource._get_stack_trace``), so a helper or a second constructor between the
    caller and the SDK would be one more frame for every resource, and the source position the engine keeps
    for the resource (the stack's first frame) would name this module instead of the line that declared it."""

    def __init__(
        self,
        kind: str,
        name: str,
        props: Mapping[str, Any],
        opts: pulumi.ResourceOptions | None = None,
        *,
        outputs: Sequence[str] = (),
    ) -> None:
        registration = _registration(self._type_token(kind), name, props, opts, outputs)
        pulumi.CustomResource.__init__(self, *registration)

    @classmethod
    def _type_token(cls, kind: str) -> str:
        """The type token of a resource of ``kind``: here the token itself; the subclasses' own kinds."""
        return kind

    def output(self, key: str) -> pulumi.Output[Any]:
        value = self.__dict__.get(key)
        if not isinstance(value, pulumi.Output):
            raise AttributeError(f"{self._name}: {key!r} is neither an input nor a declared output")
        return value


def _registration(
    token: str, name: str, props: Mapping[str, Any], opts: pulumi.ResourceOptions | None, outputs: Sequence[str]
) -> tuple[str, str, dict[str, Any], pulumi.ResourceOptions]:
    """What ``pulumi.CustomResource.__init__`` registers: the token, the name, the inputs with the declared
    outputs as None and the secret properties wrapped, and the options with the provider's version."""
    secret = SECRET_PROPERTIES.get(token, ())
    inputs = {
        key: pulumi.Output.secret(value) if key in secret else value for key, value in _without_none(props).items()
    }
    return token, name, {**{key: None for key in outputs}, **inputs}, _options(token, secret, opts)


def _options(token: str, secret: Sequence[str], opts: pulumi.ResourceOptions | None) -> pulumi.ResourceOptions:
    """``opts`` with the provider's version where it names none and the secret properties ahead of its own
    additional secret outputs: what ``ResourceOptions.merge(_defaults(token, secret), opts)`` sends, from one
    shallow copy. ``merge`` copies both sides and rebuilds every list option, about 15 µs of each resource's
    declaration (1,600 in a 30,000-node plan), to add two fields; what it normalises besides (``depends_on``
    as a list, ``providers`` as a map) the SDK normalises itself when it registers. Never ``opts`` itself: a
    caller may pass one ``ResourceOptions`` to resources of several providers."""
    if opts is None:
        return _defaults(token, secret)
    options = copy.copy(opts)
    if options.version is None:
        options.version = provider_version(token.split(":", 1)[0])
    if secret:
        options.additional_secret_outputs = [*secret, *(opts.additional_secret_outputs or ())]
    return options


class _Azure(Declared):
    """An azure-native resource; ``kind`` as in its type token, ``network:VirtualNetwork``. Its Azure ``name``
    is readable where the declaration names it (``outputs=["name"]``), as any other output: each declared
    output is an Output the SDK makes and resolves for the resource (about 30 µs), and a typed class's
    ``.name`` on every resource cost a 30,000-node plan 0.04 s of CPU for the few the program reads."""

    @classmethod
    def _type_token(cls, kind: str) -> str:
        return f"azure-native:{kind}"


if TYPE_CHECKING:
    # For mypy and editors: one overload per type token the program declares, whose ``props`` is the
    # SDK's own input type (generated by scripts/generate_azure_inputs.py), so a misspelt property fails.
    from azure_inputs import azure as azure  # typings/azure_inputs.pyi
else:
    azure = _Azure


class kubernetes(Declared):  # noqa: N801 - called like the function it replaced: declare.kubernetes(...)
    """A Kubernetes object, exactly as its manifest (``apiVersion``, ``kind``, ``metadata``, ...)."""

    def __init__(self, name: str, manifest: Mapping[str, Any], opts: pulumi.ResourceOptions | None = None) -> None:
        group_version = manifest["apiVersion"]
        token_group = group_version if "/" in group_version else f"core/{group_version}"
        token = f"kubernetes:{token_group}:{manifest['kind']}"
        pulumi.CustomResource.__init__(self, *_registration(token, name, manifest, opts, ()))


class _Bridged(Declared):
    """A resource of a bridged provider (``package``), by its kind: ``tls("PrivateKey", ...)``."""

    package: ClassVar[str]

    @classmethod
    def _type_token(cls, kind: str) -> str:
        """A bridged provider's token: ``tls:index/privateKey:PrivateKey``."""
        return f"{cls.package}:index/{kind[0].lower()}{kind[1:]}:{kind}"


class tls(_Bridged):  # noqa: N801 - as kubernetes
    package = "tls"


class random(_Bridged):  # noqa: N801 - as kubernetes
    package = "random"


def provider(
    package: str, name: str, props: Mapping[str, Any], opts: pulumi.ResourceOptions | None = None
) -> pulumi.ProviderResource:
    """An explicit provider (another subscription, the cluster's own kubeconfig)."""
    return pulumi.ProviderResource(
        package, name, _without_none(props), opts=pulumi.ResourceOptions.merge(_defaults(package), opts)
    )


def azure_client_config() -> pulumi.Output[dict[str, str]]:
    """Who `pulumi up` runs as: ``subscriptionId``, ``tenantId``, ``clientId``, ``objectId``."""
    return pulumi.runtime.invoke_output(
        "azure-native:authorization:getClientConfig",
        {},
        opts=pulumi.InvokeOutputOptions(version=provider_version("azure-native")),
    )


def _defaults(token: str, secret: Sequence[str] = ()) -> pulumi.ResourceOptions:
    package = token.split(":", 1)[0]
    return pulumi.ResourceOptions(version=provider_version(package), additional_secret_outputs=list(secret) or None)


def _without_none(value: Any) -> Any:
    """Absent, not null: a None anywhere in the properties means "not set", in a list too (an entry left
    out); the typed input classes drop None-valued properties the same way.

    Every property of every resource passes through here (41,000 values at 30,000 nodes): strings, dicts
    and lists are told by their exact type first, since ``isinstance(value, Mapping)`` asks the ABC
    machinery, the larger part of this walk's cost."""
    kind = type(value)
    if kind is str:
        return value
    if kind is dict or (kind is not list and isinstance(value, Mapping)):
        return {key: _without_none(item) for key, item in value.items() if item is not None}
    if kind is list or isinstance(value, (list, tuple)):
        return [_without_none(item) for item in value if item is not None]
    return value
