"""Compares two offline plans: what ``pulumi up`` would create, delete, update or replace, and
every rendered file that differs.

Resources are matched by URN, or through the aliases the new program declares (a rename
that keeps the resource). What forces a replacement is decided by
``plan.replacements`` from the changed input paths; a replacement or deletion of a
protected or stateful resource is flagged, because on a real stack it either stops
``pulumi up`` (protect) or loses state.

Limits of an offline diff, stated in the report: secret inputs are ``"[secret]"`` in both
plans, so a changed secret is invisible; values only the cloud knows are the mocks'.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.boot.cloudinit import COMPRESSED
from infra.day2.deploy_rules import CUSTOM_DATA_PATH, MACHINE_ROLE_TAG, RESTARTING_VM_INPUTS, ROLLED_ROLES
from infra.facts.tags import CLOUD_INIT as CLOUD_INIT_TAG
from plan.replacements import Replacement, covers, in_place_note, is_azure_id_input, replacements

# Resources whose replacement loses something even when nobody protected them: a new private
# key invalidates every certificate it signed (the whole PKI below it is re-issued).
STATEFUL_TYPES = {"tls:index/privateKey:PrivateKey": "a private key: a new key re-issues everything it signed"}
VM_TYPE = "azure-native:compute:VirtualMachine"
SCALE_SET_TYPE = "azure-native:compute:VirtualMachineScaleSet"
# Each action's symbol, as the report's table and the topology's marks show it.
SYMBOLS = {"create": "+", "delete": "-", "update": "~", "replace": "+-"}


class PlanDirectoryError(ValueError):
    """OLD_DIR is not a plan written by ``python -m plan``."""


@dataclass(frozen=True)
class Plan:
    resources: dict[str, dict[str, Any]]  # by URN, in declaration order
    outputs: dict[str, Any]
    files: dict[str, str]  # path under files/ -> text


def load_plan(directory: Path) -> Plan:
    """The plan in ``directory``, or a ``PlanDirectoryError`` naming what is wrong with it: every file is
    read and its shape checked here, so a broken plan stops the diff with one line."""
    resources_file = directory / "resources.json"
    if not resources_file.is_file():
        raise PlanDirectoryError(
            f"{directory} is not a plan directory (no resources.json); "
            f"write one with: python -m plan --stack STACK --out {directory}"
        )
    try:
        resources = json.loads(resources_file.read_text())
        outputs_file = directory / "outputs.json"
        outputs = json.loads(outputs_file.read_text()) if outputs_file.is_file() else {}
        files = _plan_files(directory / "files")
    except (OSError, ValueError) as error:
        raise PlanDirectoryError(f"{directory}: unreadable plan ({error})") from None
    if not isinstance(resources, list) or not all(
        isinstance(r, dict) and isinstance(r.get("urn"), str) for r in resources
    ):
        raise PlanDirectoryError(f"{directory}: resources.json is not a list of resources with a urn each")
    if not isinstance(outputs, dict):
        raise PlanDirectoryError(f"{directory}: outputs.json is {type(outputs).__name__}, not an object of outputs")
    return Plan({r["urn"]: r for r in resources}, outputs, files)


def _plan_files(files_dir: Path) -> dict[str, str]:
    files = {}
    # followlinks: a shard's directory may be a symlink to its pool's first shard (artifacts.write_plan).
    # Each real directory is entered once per path that reaches it from its parent: a link cycle ends.
    for folder, folders, names in os.walk(files_dir, followlinks=True):
        inside = Path(folder).relative_to(files_dir)
        ancestors = {os.path.realpath(files_dir / p) for p in [inside, *inside.parents]}
        folders[:] = [d for d in folders if os.path.realpath(Path(folder, d)) not in ancestors]
        for name in names:
            path = Path(folder, name)
            files[path.relative_to(files_dir).as_posix()] = path.read_text(errors="replace")
    return dict(sorted(files.items()))


# --------------------------------------------------------------------------- value diffs

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _child(prefix: str, key: str) -> str:
    if _IDENTIFIER.fullmatch(key):
        return f"{prefix}.{key}" if prefix else key
    return f'{prefix}["{key}"]'


def changed_paths(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Property paths (Pulumi syntax: ``a.b[0]["x.y"]``) where ``old`` and ``new`` differ."""
    if isinstance(old, dict) and isinstance(new, dict):
        paths = []
        for key in list(old) + [k for k in new if k not in old]:
            child = _child(prefix, key)
            if key not in old or key not in new:
                paths.append(child)
            else:
                paths += changed_paths(old[key], new[key], child)
        return paths
    if isinstance(old, list) and isinstance(new, list):
        paths = []
        for i in range(max(len(old), len(new))):
            child = f"{prefix}[{i}]"
            if i >= len(old) or i >= len(new):
                paths.append(child)
            else:
                paths += changed_paths(old[i], new[i], child)
        return paths
    return [] if old == new else [prefix]


# --------------------------------------------------------------------------- resource changes


@dataclass(frozen=True)
class ResourceChange:
    action: str  # "create" | "delete" | "update" | "replace"
    urn: str
    type: str
    name: str
    changed: tuple[str, ...] = ()  # inputs (and options.*) pulumi up would change
    ignored: tuple[str, ...] = ()  # changed, but under ignoreChanges: not applied
    replacements: tuple[Replacement, ...] = ()
    previous_urn: str | None = None  # set when the URN changed (alias, or matched by Azure name)
    aliased: bool = False
    stateful: str | None = None  # why losing it matters (protected, retainOnDelete, ...)
    note: str | None = None
    danger: str | None = None  # set when this change needs a human before pulumi up


@dataclass
class PlanDiff:
    resources: list[ResourceChange] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)  # changed output paths
    files_added: list[str] = field(default_factory=list)
    files_removed: list[str] = field(default_factory=list)
    files_changed: dict[str, str] = field(default_factory=dict)  # path -> unified diff

    @property
    def changed(self) -> bool:
        return bool(self.resources or self.outputs or self.files_added or self.files_removed or self.files_changed)

    @property
    def dangers(self) -> list[ResourceChange]:
        return [change for change in self.resources if change.danger]

    def of(self, action: str) -> list[ResourceChange]:
        return [change for change in self.resources if change.action == action]


def diff_plans(old: Plan, new: Plan) -> PlanDiff:
    result = PlanDiff()
    gone = {urn: r for urn, r in old.resources.items() if urn not in new.resources}
    for urn, resource in new.resources.items():
        previous = old.resources.get(urn)
        aliased = False
        if previous is None:
            previous_urn = next((a for a in resource["options"].get("aliases", []) if a in gone), None)
            aliased = previous_urn is not None
            if previous_urn is None:
                previous_urn = _same_azure_resource(resource, gone)
            if previous_urn is None:
                result.resources.append(_created(resource))
                continue
            previous = gone.pop(previous_urn)
        change = _compare(previous, resource, aliased)
        if change is not None:
            result.resources.append(change)
    result.resources += [_deleted(resource) for resource in gone.values()]
    _flag_machine_wide_restarts(result, old, new)
    _flag_capacity_sent(result, new)
    result.outputs = changed_paths(old.outputs, new.outputs)
    _diff_files(old.files, new.files, result)
    return result


def _identity(resource: dict[str, Any]) -> tuple | None:
    """What names the real resource: its Azure id segments, or a Kubernetes object's name."""
    inputs = resource["inputs"]
    if resource["type"].startswith("azure-native:"):
        parts = tuple(sorted((k, v) for k, v in inputs.items() if isinstance(v, str) and is_azure_id_input(k)))
        return (resource["type"], parts) if parts else None
    if resource["type"].startswith("kubernetes:"):
        metadata = inputs.get("metadata") or {}
        return (resource["type"], metadata.get("namespace"), metadata.get("name")) if metadata.get("name") else None
    return None


def _same_azure_resource(resource: dict[str, Any], gone: dict[str, dict[str, Any]]) -> str | None:
    identity = _identity(resource)
    if identity is None:
        return None
    return next((urn for urn, old in gone.items() if _identity(old) == identity), None)


def _cloud_init_tag(resource: dict[str, Any]) -> str | None:
    return (resource["inputs"].get("tags") or {}).get(CLOUD_INIT_TAG)


def _stateful(resource: dict[str, Any]) -> str | None:
    options = resource["options"]
    if options.get("protect"):
        return "protected"
    if options.get("retainOnDelete"):
        return "retained on delete"
    return STATEFUL_TYPES.get(resource["type"])


def _losing(verb: str, stateful: str) -> str:
    """``deletes a protected resource``; a stateful type names itself (``replaces a private key: ...``)."""
    return f"{verb} {stateful}" if stateful in STATEFUL_TYPES.values() else f"{verb} a {stateful} resource"


def _created(resource: dict[str, Any]) -> ResourceChange:
    return ResourceChange("create", resource["urn"], resource["type"], resource["name"])


def _deleted(resource: dict[str, Any]) -> ResourceChange:
    stateful = _stateful(resource)
    danger = None
    if stateful:
        danger = _losing("deletes", stateful) + (
            ": pulumi up stops here until it is unprotected on purpose" if stateful == "protected" else ""
        )
    return ResourceChange(
        "delete", resource["urn"], resource["type"], resource["name"], stateful=stateful, danger=danger
    )


def _compare(old: dict[str, Any], new: dict[str, Any], aliased: bool) -> ResourceChange | None:
    urn_changed = old["urn"] != new["urn"]
    input_paths = changed_paths(old["inputs"], new["inputs"])
    if new["type"] == VM_TYPE and _cloud_init_tag(old) != _cloud_init_tag(new) and CUSTOM_DATA_PATH not in input_paths:
        # A VM that ignored its customData holds, in the state, the cloud-init its tag names, not the one the old
        # plan declared: a new tag is a new customData for pulumi up.
        input_paths.append(CUSTOM_DATA_PATH)
    option_paths = [
        f"options.{path}"
        for path in changed_paths(
            {k: v for k, v in old["options"].items() if k != "aliases"},
            {k: v for k, v in new["options"].items() if k != "aliases"},
        )
    ]
    if not input_paths and not option_paths and not urn_changed:
        return None
    ignore = new["options"].get("ignoreChanges", [])
    ignored = tuple(p for p in input_paths if any(covers(pattern, p) for pattern in ignore))
    applied = [p for p in input_paths if p not in ignored]
    replaced = replacements(new["type"], applied, new["options"].get("replaceOnChanges", []))
    if urn_changed and not aliased:
        replaced.append(
            Replacement(
                "urn",
                f"the URN changed from {old['urn']} with no alias: Pulumi deletes "
                f"the old resource and creates the new one",
            )
        )
    stateful = _stateful(old) or _stateful(new)
    danger = None
    if replaced and stateful:
        danger = _losing("replaces", stateful)
    elif old["options"].get("protect") and not new["options"].get("protect"):
        danger = "removes protection: the next change may delete it"
    return ResourceChange(
        action="replace" if replaced else "update",
        urn=new["urn"],
        type=new["type"],
        name=new["name"],
        changed=tuple(applied + option_paths),
        ignored=ignored,
        replacements=tuple(replaced),
        previous_urn=old["urn"] if urn_changed else None,
        aliased=aliased,
        stateful=stateful,
        note=in_place_note(new["type"], applied),
        danger=danger,
    )


# --------------------------------------------------------------------------- day 2: machines and pools


def _role(resource: dict[str, Any] | None) -> str | None:
    tags = (resource or {}).get("inputs", {}).get("tags") or {}
    role = tags.get(MACHINE_ROLE_TAG)
    return role if role in ROLLED_ROLES else None


def _disruption(change: ResourceChange) -> str | None:
    """How this change takes a VM down, if it does: replaced, deleted, or restarted by an in-place change."""
    if change.type == SCALE_SET_TYPE and change.action in ("replace", "delete"):
        return change.action + "d (every instance)"
    if change.type != VM_TYPE:
        return None
    if change.action in ("replace", "delete"):
        return change.action + "d"
    restarting = [p for p in change.changed if any(covers(path, p) for path in RESTARTING_VM_INPUTS)]
    return f"restarted ({', '.join(restarting)})" if restarting else None


def _flag_machine_wide_restarts(result: PlanDiff, old: Plan, new: Plan) -> None:
    """More than one control-plane, etcd or NAT machine down in one deploy is a danger: the role's
    capacity (quorum, for etcd) goes with them. Each change names every machine of its role that goes."""
    by_role: dict[str, list[int]] = {}
    for index, change in enumerate(result.resources):
        role = _role(new.resources.get(change.urn)) or _role(old.resources.get(change.previous_urn or change.urn))
        if role and _disruption(change):
            by_role.setdefault(role, []).append(index)
    for role, indexes in by_role.items():
        whole_set = any(result.resources[i].type == SCALE_SET_TYPE for i in indexes)
        if len(indexes) < 2 and not whole_set:
            continue
        names = ", ".join(f"{result.resources[i].name} {_disruption(result.resources[i])}" for i in indexes)
        for i in indexes:
            change = result.resources[i]
            danger = (
                f"every {role} machine goes down in one deploy ({names}); change its model instead, which "
                f"Azure rolls one instance at a time (docs/day2.md)"
                if whole_set
                else f"{len(indexes)} {role} machines go down in one deploy ({names}); roll them one per "
                f"deploy (docs/day2.md)"
            )
            result.resources[i] = dataclasses.replace(
                change, danger=f"{change.danger}; {danger}" if change.danger else danger
            )


def _flag_capacity_sent(result: PlanDiff, new: Plan) -> None:
    """A model update of a live scale set that carries ``sku.capacity`` sets the live capacity to it: with
    ``ignoreChanges`` Pulumi sends the value stored at creation, not the autoscaler's (docs/day2.md)."""
    for i, change in enumerate(result.resources):
        if change.type != SCALE_SET_TYPE or change.action not in ("update", "replace"):
            continue
        capacity = (new.resources[change.urn]["inputs"].get("sku") or {}).get("capacity")
        if capacity is None or _role(new.resources[change.urn]):  # the apiservers': no autoscaler owns it
            continue
        danger = (
            f"sends sku.capacity={capacity} to a live scale set: Azure scales the pool to it, deleting "
            f"the nodes above it"
        )
        result.resources[i] = dataclasses.replace(
            change, danger=f"{change.danger}; {danger}" if change.danger else danger
        )


# --------------------------------------------------------------------------- rendered files


def _diff_files(old: dict[str, str], new: dict[str, str], result: PlanDiff) -> None:
    result.files_added = sorted(set(new) - set(old))
    result.files_removed = sorted(set(old) - set(new))
    for path in sorted(set(old) & set(new)):
        if old[path] != new[path]:
            result.files_changed[path] = (
                "\n".join(
                    difflib.unified_diff(
                        _readable(path, old[path]).splitlines(),
                        _readable(path, new[path]).splitlines(),
                        fromfile=f"a/files/{path}",
                        tofile=f"b/files/{path}",
                        lineterm="",
                    )
                )
                + "\n"
            )


# A compressed write_files entry as cloud-init.yaml holds it (``cloudinit.COMPRESSED``: the keys in the order
# ``cloudinit`` writes them, its content one line of base64).
_PACKED = re.compile(
    rf"^- path: (?P<path>\S+)\n(?P<keys>(?:  \w+: .*\n)*?)(?P<encoding>  encoding: {re.escape(COMPRESSED)}\n)"
    r"  content: (?P<content>\S+)$",
    re.MULTILINE,
)


def _readable(path: str, text: str) -> str:
    """A plan file as its diff shows it: in a ``cloud-init.yaml``, a compressed file's base64 (a line of up to
    15,000 characters that reads as nothing) becomes a pointer to its decoded copy beside it, whose own diff
    shows the change, with a digest of the base64, so a changed file still changes the line."""
    if not path.endswith("/cloud-init.yaml"):
        return text
    folder = path.removesuffix("/cloud-init.yaml")

    def pointer(match: re.Match[str]) -> str:
        digest = hashlib.sha256(match["content"].encode()).hexdigest()[:16]
        return (
            f"- path: {match['path']}\n{match['keys']}{match['encoding']}"
            f"  content: '[compressed: decoded in files/{folder}{match['path']}, sha256 {digest}]'"
        )

    return _PACKED.sub(pointer, text)
