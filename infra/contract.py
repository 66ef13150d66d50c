"""The outputs contract: the one stack output, ``cluster``, that other teams may build on.

The dataclasses below *are* the schema: each field's metadata names its camelCase key,
its kind, whether it is secret and the minor version that added it. The producer
(``build_contract`` + ``to_document``, exported by ``__main__.py``) and the consumer
(``parse_contract``, wrapped by ``components/cluster_reference.py``) both read them,
so the two sides cannot drift apart.

Versioning (``schemaVersion`` "MAJOR.MINOR"):
- a minor release only *adds* optional fields; a reader of 2.x reads any 2.y and
  ignores keys it does not know;
- removing, renaming or retyping a field is a new major; a reader refuses any other
  major, naming both versions. The day-2 checks of this program, which read the stack's own
  last outputs, also accept the previous major (``previous_major=True``): the deploy that
  upgrades a stack reads what the release before it wrote.

2.0 removed 1.x's ``adminKubeconfig`` (``RETIRED_SECRETS``): no output holds a credential. Consumers build
their own kubeconfig from ``apiserver.endpoint`` and ``apiserver.caCertificate`` with a credential of their own.

Pure Python and standard library only: a consuming team may vendor this file and
``components/cluster_reference.py`` without the rest of supercluster.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

OUTPUT_NAME = "cluster"
SCHEMA_MAJOR = 2
SCHEMA_MINOR = 0
SCHEMA_VERSION = f"{SCHEMA_MAJOR}.{SCHEMA_MINOR}"
# Secret fields of the previous major that this one removed (2.0: the cluster-admin kubeconfig). The previous
# major has every field of this one (2.0 only removed), so this schema reads it; these keys it ignores.
RETIRED_SECRETS = {1: ("adminKubeconfig",)}


class ContractError(ValueError):
    """A stack output that this reader cannot trust; ``str()`` says which stack, field and why."""


# --------------------------------------------------------------------------- kinds of values


@dataclass(frozen=True)
class Scalar:
    label: str  # the kind's name in the contract table of docs/outputs-contract.md
    name: str  # what the error message says was expected
    check: Callable[[Any], bool]
    normalize: Callable[[Any], Any] = lambda value: value


def _is_schema(kind: Any) -> bool:
    return isinstance(kind, type) and dataclasses.is_dataclass(kind)


def _is_count(value: Any) -> bool:
    # Pulumi carries numbers as protobuf doubles: a count read back from a stack may be 3.0.
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 and float(value).is_integer()


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and value.strip() != ""


def _parses(parser: Callable[[str], Any]) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        if not isinstance(value, str):
            return False
        try:
            parser(value)
        except ValueError:
            return False
        return True

    return check


TEXT = Scalar("string", "a non-empty string", _is_text)
AZURE_ID = Scalar(
    "Azure id",
    "an Azure resource id (/subscriptions/...)",
    lambda v: isinstance(v, str) and v.startswith("/subscriptions/"),
)
CIDR = Scalar("CIDR", "an IPv4 range such as 10.0.0.0/16", _parses(lambda v: ipaddress.IPv4Network(v, strict=True)))
IP = Scalar("IPv4", "an IPv4 address", _parses(ipaddress.IPv4Address))
HTTPS_URL = Scalar(
    "URL", "an https:// URL", lambda v: isinstance(v, str) and re.fullmatch(r"https://[^\s/]+(/\S*)?", v) is not None
)
PEM_CERTIFICATE = Scalar(
    "PEM", "a PEM certificate", lambda v: isinstance(v, str) and v.startswith("-----BEGIN CERTIFICATE-----")
)
KUBERNETES_VERSION = Scalar(
    "version",
    "a Kubernetes version such as 1.33.4",
    lambda v: isinstance(v, str) and re.fullmatch(r"1\.[0-9]+\.[0-9]+", v) is not None,
)
COUNT = Scalar("int >= 0", "a whole number >= 0", _is_count, int)
FLAG = Scalar("bool", "true or false", lambda v: isinstance(v, bool))
# infra.facts.labels.POOL_ROLES, spelled here so this file stays vendorable (tests/infra/test_contract.py checks both
# agree).
POOL_ROLES = ("gpu", "cpu", "system")
ROLE = Scalar("`gpu`, `cpu` or `system`", "gpu, cpu or system", lambda v: v in POOL_ROLES)


@dataclass(frozen=True)
class MapOf:
    """A JSON object with free keys (pool names, subnet keys) and values of one kind."""

    value: Any


@dataclass(frozen=True)
class ListOf:
    item: Any


def spec(key: str, kind: Any, doc: str, *, secret: bool = False, since: int = 0) -> Any:
    """A contract field: its JSON ``key``, its ``kind``, and the minor version that added it.
    Fields added after 1.0 (``since > 0``) must default to None: older producers lack them."""
    metadata = {"key": key, "kind": kind, "doc": doc, "secret": secret, "since": since}
    if since > 0:
        return dataclasses.field(default=None, metadata=metadata)
    return dataclasses.field(metadata=metadata)


# --------------------------------------------------------------------------- the schema


@dataclass(frozen=True)
class Network:
    vnet_ids: Mapping[str, str] = spec(
        "vnetIds", MapOf(AZURE_ID), "VNet resource ids by key: `system` and one per node pool"
    )
    subnet_ids: Mapping[str, str] = spec(
        "subnetIds",
        MapOf(AZURE_ID),
        "subnet resource ids by key: `etcd`, `events-etcd`, `apiserver`, `nat`, "
        "`endpoints`, and one per scale set (`h100a-s000`)",
    )
    pod_cidrs: Mapping[str, str] = spec(
        "podCidrs",
        MapOf(CIDR),
        "by node pool, the range its pods (and nodes) take addresses from: the pool's VNet (alias IPs, no overlay)",
    )
    service_cidr: str = spec("serviceCidr", CIDR, "the Kubernetes service range")
    dns_service_ip: str = spec("dnsServiceIp", IP, "the cluster DNS service address")
    nat_frontend_ip: str = spec(
        "natFrontendIp", IP, "the NAT hosts' internal load balancer: route `serviceCidr` here from the hub"
    )


@dataclass(frozen=True)
class Apiserver:
    endpoint: str = spec("endpoint", HTTPS_URL, "`https://<internal load balancer IP>:6443`")
    ca_certificate: str = spec("caCertificate", PEM_CERTIFICATE, "the cluster CA (PEM) that signs the apiserver")


@dataclass(frozen=True)
class Shard:
    name: str = spec("name", TEXT, "the shard's stable name, e.g. `h100a-s003`; also its subnet key")
    scale_set_id: str = spec("scaleSetId", AZURE_ID, "the VM scale set's resource id")
    subnet_id: str = spec("subnetId", AZURE_ID, "the shard's subnet id")


@dataclass(frozen=True)
class NodePool:
    role: str = spec("role", ROLE, "what the pool's nodes are for")
    vm_size: str = spec("vmSize", TEXT, "Azure VM size")
    min_nodes: int = spec("minNodes", COUNT, "autoscaler lower bound")
    max_nodes: int = spec("maxNodes", COUNT, "autoscaler upper bound (0 once retired)")
    retired: bool = spec("retired", FLAG, "true: no new nodes; the pool is on its way out")
    shards: tuple[Shard, ...] = spec("shards", ListOf(Shard), "its scale sets, in shard order")


@dataclass(frozen=True)
class EtcdBackup:
    storage_account_id: str = spec("storageAccountId", AZURE_ID, "the storage account holding etcd snapshots")
    container_url: str = spec("containerUrl", HTTPS_URL, "the blob container the snapshots are uploaded to")


@dataclass(frozen=True)
class ClusterContract:
    schema_version: str = spec("schemaVersion", TEXT, "MAJOR.MINOR of this contract")
    cluster_name: str = spec("clusterName", TEXT, "the cluster's name; prefixes every Azure name")
    location: str = spec("location", TEXT, "Azure region")
    resource_group_name: str = spec("resourceGroupName", TEXT, "the resource group holding the cluster")
    kubernetes_version: str = spec("kubernetesVersion", KUBERNETES_VERSION, "control plane and kubelet release")
    network: Network = spec("network", Network, "VNets, subnets and address ranges")
    apiserver: Apiserver = spec("apiserver", Apiserver, "how to reach the Kubernetes API")
    node_pools: Mapping[str, NodePool] = spec("nodePools", MapOf(NodePool), "node pools by name")
    etcd_backup: EtcdBackup = spec("etcdBackup", EtcdBackup, "where the main etcd cluster's snapshots go")


def fields_of(schema: type) -> tuple[dataclasses.Field[Any], ...]:
    return dataclasses.fields(schema)


def secret_paths(schema: type = ClusterContract, prefix: str = "") -> list[str]:
    """Dotted JSON paths of every secret field (none since 2.0; 1.x had ``adminKubeconfig``)."""
    paths = []
    for field in fields_of(schema):
        path = f"{prefix}{field.metadata['key']}"
        kind = field.metadata["kind"]
        if field.metadata["secret"]:
            paths.append(path)
        elif _is_schema(kind):
            paths += secret_paths(kind, f"{path}.")
    return paths


# --------------------------------------------------------------------------- producer side


def build_contract(
    *,
    cluster_name: Any,
    location: Any,
    resource_group_name: Any,
    kubernetes_version: Any,
    vnet_ids: Any,
    subnet_ids: Any,
    pod_cidrs: Any,
    service_cidr: Any,
    dns_service_ip: Any,
    nat_frontend_ip: Any,
    apiserver_endpoint: Any,
    ca_certificate: Any,
    node_pools: Any,
    etcd_backup_storage_account_id: Any,
    etcd_backup_container_url: Any,
) -> ClusterContract:
    """The contract of this release. Values may be plain or Pulumi Outputs: nothing here looks inside."""
    return ClusterContract(
        schema_version=SCHEMA_VERSION,
        cluster_name=cluster_name,
        location=location,
        resource_group_name=resource_group_name,
        kubernetes_version=kubernetes_version,
        network=Network(
            vnet_ids=vnet_ids,
            subnet_ids=subnet_ids,
            pod_cidrs=pod_cidrs,
            service_cidr=service_cidr,
            dns_service_ip=dns_service_ip,
            nat_frontend_ip=nat_frontend_ip,
        ),
        apiserver=Apiserver(endpoint=apiserver_endpoint, ca_certificate=ca_certificate),
        node_pools=node_pools,
        etcd_backup=EtcdBackup(
            storage_account_id=etcd_backup_storage_account_id, container_url=etcd_backup_container_url
        ),
    )


def to_document(value: Any) -> Any:
    """A contract dataclass -> the JSON-shaped dict that is exported (camelCase keys, None left out)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            field.metadata["key"]: to_document(getattr(value, field.name))
            for field in fields_of(type(value))
            if getattr(value, field.name) is not None
        }
    if isinstance(value, Mapping):
        return {key: to_document(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_document(item) for item in value]
    return value


# --------------------------------------------------------------------------- consumer side


def parse_version(version: Any, source: str, *, previous_major: bool = False) -> tuple[int, int]:
    """``"2.3"`` -> ``(2, 3)``; refuses any major this reader was not written for (``previous_major``: but
    the one before, during the transition)."""
    match = re.fullmatch(r"([0-9]+)\.([0-9]+)", version) if isinstance(version, str) else None
    if match is None:
        raise ContractError(f'{source}: `{OUTPUT_NAME}.schemaVersion` is {version!r}, expected "MAJOR.MINOR"')
    major, minor = int(match.group(1)), int(match.group(2))
    if major > SCHEMA_MAJOR:
        raise ContractError(
            f"{source}: contract {major}.{minor} is newer than this reader ({SCHEMA_MAJOR}.x); "
            f"update infra/contract.py and components/cluster_reference.py to a supercluster release "
            f"that reads {major}.x"
        )
    if previous_major and major == SCHEMA_MAJOR - 1:
        return major, 0  # its fields are this major's x.0 fields (RETIRED_SECRETS aside)
    if major < SCHEMA_MAJOR:
        raise ContractError(
            f"{source}: contract {major}.{minor} is older than this reader ({SCHEMA_MAJOR}.x); "
            f"upgrade the cluster stack, or pin a supercluster release that reads {major}.x"
        )
    return major, minor


def parse_contract(
    document: Any, source: str, *, secret_placeholder: str | None = None, previous_major: bool = False
) -> ClusterContract:
    """Checks a ``cluster`` output against the contract and returns its typed view.

    ``source`` names the stack in every message. ``secret_placeholder`` (the offline plan's
    ``"[secret]"``) is accepted for secret fields, and then *required*: a plan that shows a
    secret field in clear text fails.
    """
    if document is None:
        raise ContractError(
            f"{source}: no `{OUTPUT_NAME}` output; is it a supercluster stack, deployed with "
            f"contract {SCHEMA_MAJOR}.0 or later?"
        )
    if not isinstance(document, Mapping):
        raise ContractError(f"{source}: `{OUTPUT_NAME}` is {type(document).__name__}, expected an object")
    major, minor = parse_version(document.get("schemaVersion"), source, previous_major=previous_major)
    problems: list[str] = []
    contract: ClusterContract = _read(ClusterContract, document, OUTPUT_NAME, minor, secret_placeholder, problems)
    if problems:
        raise ContractError(
            f"{source}: `{OUTPUT_NAME}` does not match contract {major}.{minor}: " + "; ".join(problems)
        )
    return contract


def _read(kind: Any, value: Any, path: str, minor: int, placeholder: str | None, problems: list[str]) -> Any:
    if _is_schema(kind):
        if not isinstance(value, Mapping):
            problems.append(f"{path}: expected an object")
            return None
        values: dict[str, Any] = {}
        for field in fields_of(kind):
            meta = field.metadata
            child = f"{path}.{meta['key']}"
            if meta["key"] not in value or value[meta["key"]] is None:
                if meta["since"] <= minor:
                    problems.append(f"{child}: missing")
                values[field.name] = None
            elif meta["secret"] and placeholder is not None:
                if value[meta["key"]] != placeholder:
                    problems.append(f"{child}: must be a secret, found in clear text")
                values[field.name] = value[meta["key"]]
            else:
                values[field.name] = _read(meta["kind"], value[meta["key"]], child, minor, placeholder, problems)
        return kind(**values)
    if isinstance(kind, MapOf):
        if not isinstance(value, Mapping) or not value:
            problems.append(f"{path}: expected a non-empty object")
            return {}
        return {
            key: _read(kind.value, item, f"{path}.{key}", minor, placeholder, problems) for key, item in value.items()
        }
    if isinstance(kind, ListOf):
        if not isinstance(value, list) or not value:
            problems.append(f"{path}: expected a non-empty list")
            return ()
        return tuple(
            _read(kind.item, item, f"{path}[{i}]", minor, placeholder, problems) for i, item in enumerate(value)
        )
    if not kind.check(value):
        problems.append(f"{path}: {value!r} is not {kind.name}")
        return value
    return kind.normalize(value)


def describe(schema: type = ClusterContract, prefix: str = "") -> list[tuple[str, str, str]]:
    """``(path, kind, doc)`` rows for the contract table of docs/outputs-contract.md, generated so the docs
    cannot drift."""
    rows = []
    for field in fields_of(schema):
        meta = field.metadata
        path, kind = f"{prefix}{meta['key']}", meta["kind"]
        if _is_schema(kind):
            rows += describe(kind, f"{path}.")
        elif isinstance(kind, MapOf) and _is_schema(kind.value):
            rows += describe(kind.value, f"{path}.<name>.")
        elif isinstance(kind, ListOf) and _is_schema(kind.item):
            rows += describe(kind.item, f"{path}[].")
        else:
            rows.append((path, _kind_name(kind) + (" (secret)" if meta["secret"] else ""), meta["doc"]))
    return rows


def _kind_name(kind: Any) -> str:
    if isinstance(kind, MapOf):
        return f"map of {_kind_name(kind.value)}"
    if isinstance(kind, ListOf):
        return f"list of {_kind_name(kind.item)}"
    label: str = kind.label
    return label
