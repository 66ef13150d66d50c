"""Reads this stack's config from the Pulumi runtime and hands it to ``infra.config.cluster_config``.

The CLI passes config as strings (objects and lists JSON-encoded); this is the only
place that knows, so ``infra/`` sees plain Python values and never imports Pulumi.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pulumi
from pulumi.runtime import config as runtime_config

from infra.assembly.desired_cluster import Cluster, assemble
from infra.cluster.cluster_spec import RollingUpgradeReader
from infra.config.cluster_config import LOCATION_KEY, check_config_keys, decode_cli_value
from infra.config.errors import NAMESPACE, ConfigError
from infra.day2.deploy_rules import RollingUpgrade


def raw_stack_config() -> tuple[dict[str, Any], Any]:
    """``({"network": {...}, ...}, location)`` from every ``supercluster:*`` key the stack sets."""
    merged: dict[str, Any] = dict(runtime_config.get_config_env())
    merged.update(runtime_config.CONFIG.get())
    try:
        check_config_keys(merged)
    except ConfigError as error:
        raise pulumi.RunError(str(error)) from error
    prefix = f"{NAMESPACE}:"
    raw = {key[len(prefix) :]: decode_cli_value(value) for key, value in merged.items() if key.startswith(prefix)}
    return raw, merged.get(LOCATION_KEY)


class ConfigRunError(pulumi.RunError):
    """A config mistake found inside an apply, once another stack's outputs are known (a hub's contract). A
    RunError, so Pulumi prints the one line and no traceback, and never a ValueError, so Pulumi does not wrap it
    once per dependent resource; ``config_error`` is what the offline plan prints."""

    def __init__(self, error: ConfigError) -> None:
        super().__init__(str(error))
        self.config_error = error


# The engine's builtin provider answers it with a stack's outputs (what a StackReference reads), synchronously:
# pulumi/pulumi pkg/resource/deploy/builtins.go (readStackOutputs); the Node.js SDK's StackReference uses it too.
READ_STACK_OUTPUTS = "pulumi:pulumi:readStackOutputs"


def own_stack_name() -> str:
    """This stack, fully qualified (a DIY backend's organization is ``organization``)."""
    return f"{pulumi.get_organization()}/{pulumi.get_project()}/{pulumi.get_stack()}"


def previous_outputs() -> dict[str, Any]:
    """What the last ``pulumi up`` of this stack exported (``{}`` before the first). Read before any resource
    is declared, so a change the live cluster cannot take stops the program with nothing declared."""
    result = pulumi.runtime.invoke(READ_STACK_OUTPUTS, {"name": own_stack_name()})
    outputs = (result.value or {}).get("outputs")
    return dict(outputs) if isinstance(outputs, dict) else {}


# `az` answers within this or the deploy stops: it is the deploy's own signed-in Azure CLI (azure/login).
AZ_TIMEOUT_SECONDS = 120


def _az_json(command: list[str], missing: Any = ...) -> Any:
    """The command's JSON; ``missing`` when Azure answers NotFound and the caller allows it."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=AZ_TIMEOUT_SECONDS)
    if done.returncode != 0:
        if missing is not ... and "NotFound" in done.stderr:
            return missing
        raise pulumi.RunError(f"{' '.join(command[:4])}: {done.stderr.strip() or done.returncode}")
    return json.loads(done.stdout or "null")


def az_rolling_upgrade(resource_group: str, scale_set: str) -> RollingUpgrade:
    """Where the apiserver scale set's rollout stands, from Azure, before anything is declared: its latest
    rolling upgrade (``az vmss rolling-upgrade get-latest``; none yet when every instance was created from
    the model) and each instance's ``latestModelApplied`` (``az vmss list-instances``)."""
    where = ["--resource-group", resource_group, "--name", scale_set, "--output", "json"]
    latest = _az_json(["az", "vmss", "rolling-upgrade", "get-latest", *where], missing=None)
    applied = _az_json(["az", "vmss", "list-instances", *where, "--query", "[].latestModelApplied"]) or []
    return RollingUpgrade(latest if isinstance(latest, dict) else None, tuple(bool(a) for a in applied))


# The offline plan puts its stand-in here (plan/runner.py): it cannot ask Azure.
rolling_upgrade_reader: RollingUpgradeReader = az_rolling_upgrade


def load_cluster() -> Cluster:
    """The desired cluster (``infra.assembly.desired_cluster``), or a ``pulumi.RunError`` (printed without a
    traceback) naming
    the key."""
    raw, location = raw_stack_config()
    try:
        return assemble(raw, location, previous_outputs(), rolling_upgrade_reader)
    except ConfigError as error:
        raise pulumi.RunError(str(error)) from error
