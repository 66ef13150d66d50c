"""The last deploy's outputs, checked before any day-2 rule stands on them.

Every day-2 refusal (a pool dropped unretired, an etcd cluster changed by more than one member, a
live setting changed, a skipped Kubernetes minor) reads these outputs. Read too kindly, a wrong
file turns them all off without a word: outputs filed under another stack name, outputs printed by
``pulumi stack output --json`` without ``--show-secrets`` (the ``cluster`` output is then the string
``"[secret]"``), or a mistyped field. So they are checked here against what this program exports:
the ``cluster`` output against the outputs contract with its version (``infra/contract.py``; the previous
major too, which the release before this one wrote: its ``adminKubeconfig`` is ignored), and
the program's own outputs (``rollout``, ``machineImages``, the etcd client URLs, ``network``, ``monitoring``)
against the shapes below. Pure Python: the program (``infra/cluster/cluster_spec.py``) and the offline plan's
``--diff`` and ``--stack-outputs`` (``plan/__main__.py``) call the same function.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from infra.config.errors import ConfigError
from infra.contract import (
    CIDR,
    COUNT,
    HTTPS_URL,
    IP,
    KUBERNETES_VERSION,
    OUTPUT_NAME,
    RETIRED_SECRETS,
    SCHEMA_MAJOR,
    TEXT,
    ContractError,
    ListOf,
    MapOf,
    Scalar,
    parse_contract,
    secret_paths,
)
from infra.day2.deploy_rules import (
    APISERVER_ROLE,
    APISERVER_SCALE_SET_RECORD,
    MACHINE_IMAGES_OUTPUT,
    MONITORING_OUTPUT,
    NAT_HOST_ROLE,
    ROLLOUT_OUTPUT,
)
from infra.etcd.membership_change import CLIENT_URL_OUTPUTS

# What the Pulumi CLI prints for a secret output without --show-secrets, and the offline plan for a secret.
MASKED = "[secret]"
SHOW_SECRETS = "pulumi stack output --json --show-secrets"

_MACHINE = {
    "name": TEXT,
    "cloudInit": TEXT,
    "vmSize": TEXT,
    "kubernetesVersion": KUBERNETES_VERSION,
    "imageVersion": TEXT,
}


@dataclass(frozen=True)
class MayLack:
    """A value of ``shape`` that an output may lack: a key an older deploy did not write, or a list that is
    empty (a stack whose apiserver VMs are all retired)."""

    shape: Any


# The program's own outputs that the day-2 rules read (__main__.py exports them), by output name. Keys not
# listed here are not read, so not checked; an output missing from an older deploy is read as absent.
OWN_OUTPUTS: dict[str, Any] = {
    ROLLOUT_OUTPUT: {
        "machines": {APISERVER_ROLE: MayLack(ListOf(_MACHINE)), NAT_HOST_ROLE: ListOf(_MACHINE)},
        APISERVER_SCALE_SET_RECORD: MayLack(_MACHINE),
        "nodeKubernetesVersion": KUBERNETES_VERSION,
        "nodeMachineImageVersion": TEXT,
    },
    MACHINE_IMAGES_OUTPUT: {"version": TEXT, "contents": MapOf(TEXT)},
    "network": {"addressSpace": CIDR, "serviceCidr": CIDR, "natLoadBalancerIp": IP},
    MONITORING_OUTPUT: {"nodeShards": COUNT},
    **{name: ListOf(HTTPS_URL) for name in CLIENT_URL_OUTPUTS.values()},
}


def check_previous_outputs(outputs: Any, source: str, *, required: bool = False) -> Mapping[str, Any]:
    """``outputs`` (``{output name: value}``, as ``pulumi stack output --json --show-secrets`` prints them),
    or a ``ConfigError`` naming ``source``, the output and what is accepted. ``required``: the caller was
    given outputs, so an empty set may not pass for a first deploy."""
    if not isinstance(outputs, Mapping):
        raise ConfigError(source, outputs, f"an object of output name to value, as `{SHOW_SECRETS}` prints")
    if not outputs:
        if required:
            raise ConfigError(
                source, outputs, f"the last deploy's outputs (`{SHOW_SECRETS}`); leave them out for a first deploy"
            )
        return outputs
    if OUTPUT_NAME not in outputs:
        raise ConfigError(
            source,
            sorted(outputs),
            f"the outputs of a supercluster stack, with a `{OUTPUT_NAME}` output (these name none: another "
            "stack's outputs, or filed under another stack name?)",
        )
    retired = RETIRED_SECRETS.get(SCHEMA_MAJOR - 1, ())
    allowed = {f"{OUTPUT_NAME}.{path}" for path in (*secret_paths(), *retired)}
    for path in _masked_paths(outputs):
        if path not in allowed:
            raise ConfigError(f"{source}: {path}", MASKED, f"the value itself: print the outputs with `{SHOW_SECRETS}`")
    try:
        parse_contract(outputs[OUTPUT_NAME], source, previous_major=True)
    except ContractError as error:
        raise ConfigError(f"{source}: {OUTPUT_NAME}", _kind(outputs[OUTPUT_NAME]), _why(error, source)) from None
    for name, shape in OWN_OUTPUTS.items():
        if name in outputs:
            problems = _problems(shape, outputs[name], name)
            if problems:
                path, value, expected = problems[0]
                raise ConfigError(f"{source}: {path}", value, expected)
    return outputs


def _masked_paths(value: Any, path: str = "") -> list[str]:
    if value == MASKED:
        return [path]
    if isinstance(value, Mapping):
        return [p for key, item in value.items() for p in _masked_paths(item, f"{path}.{key}" if path else str(key))]
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in _masked_paths(item, f"{path}[{i}]")]
    return []


def _problems(shape: Any, value: Any, path: str) -> list[tuple[str, Any, str]]:
    """``(path, value, what is expected)`` for each part of ``value`` that does not have ``shape``."""
    if isinstance(shape, MayLack):
        return [] if value in (None, []) else _problems(shape.shape, value, path)
    if isinstance(shape, dict):
        if not isinstance(value, Mapping):
            return [(path, _kind(value), "an object with " + ", ".join(shape))]
        return [p for key, inner in shape.items() for p in _problems(inner, value.get(key), f"{path}.{key}")]
    if isinstance(shape, (ListOf, MapOf)):
        items = list(enumerate(value)) if isinstance(value, list) else None
        if isinstance(shape, MapOf):
            items = list(value.items()) if isinstance(value, Mapping) else None
        if not items:
            kind = "list" if isinstance(shape, ListOf) else "object"
            return [(path, _kind(value), f"a non-empty {kind}")]
        inner = shape.item if isinstance(shape, ListOf) else shape.value
        suffix = "[{}]" if isinstance(shape, ListOf) else ".{}"
        return [p for key, item in items for p in _problems(inner, item, path + suffix.format(key))]
    assert isinstance(shape, Scalar)
    return [] if shape.check(value) else [(path, value, shape.name)]


def _kind(value: Any) -> Any:
    """A value as an error line shows it: a scalar itself, an object or list by its kind only."""
    return f"<{type(value).__name__}>" if isinstance(value, (Mapping, list)) else value


def _why(error: ContractError, source: str) -> str:
    return f"the outputs contract ({str(error).removeprefix(f'{source}: ')})"
