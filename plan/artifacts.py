"""Turns a program run into the plan directory: resources, outputs, and every file a machine receives.

Files are decoded from what the program actually declared (a VM's or scale set's
customData, a Kubernetes object's inputs), never re-rendered on the side, so the
plan cannot drift from ``pulumi up``.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import os
import posixpath
from pathlib import Path
from typing import Any

import yaml

from infra.assembly import machine_image
from infra.boot import yaml_text
from plan.mocks import SECRET, Registration

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: 10x faster
IMAGE_TEMPLATE = "azure-native:virtualmachineimages:VirtualMachineImageTemplate"
# Written into every plan directory: ``--out`` replaces an existing folder only when it holds this file
# (a plan this program wrote), so a mistyped --out (``.``, a home directory, a user's folder) is never deleted.
PLAN_MARKER = ".supercluster-plan"
PLAN_MARKER_TEXT = "Written by `python -m plan`: a later `python -m plan --out` may replace this folder.\n"
VM_TYPES = {
    "azure-native:compute:VirtualMachine": ("osProfile", "customData"),
    "azure-native:compute:VirtualMachineScaleSet": ("virtualMachineProfile", "osProfile", "customData"),
}


def _raw_custom_data(registration: Registration) -> str | None:
    """A VM's or scale set's customData as the request carries it (base64); None for other resources."""
    path = VM_TYPES.get(registration.type)
    value: Any = registration.inputs
    for key in path or ():
        value = value.get(key) if isinstance(value, dict) else None
    return value if path and isinstance(value, str) and value != SECRET else None


def custom_data_of(registration: Registration) -> str | None:
    """The decoded cloud-init of a VM or scale set, or None for other resources."""
    raw = _raw_custom_data(registration)
    return None if raw is None else _decoded(raw)


def cloud_init_files(registration: Registration) -> dict[str, str]:
    """``{machine path: content}`` of every file a VM's or scale set's cloud-init writes; empty for other
    resources."""
    cloud_init = custom_data_of(registration)
    if cloud_init is None:
        return {}
    return {path: _file_content(entry) for path, entry in cloud_init_entries(cloud_init).items()}


@functools.lru_cache(maxsize=64)
def cloud_init_entries(cloud_init: str) -> dict[str, dict[str, Any]]:
    """``{machine path: write_files entry}`` of a cloud-init, parsed once per distinct text (the shards of a
    pool share theirs). Shared between callers: read it, never change it."""
    document = yaml.load(cloud_init, Loader=_Loader) or {}
    return {entry["path"]: entry for entry in document.get("write_files") or []}


def _decoded(raw: str) -> str:
    try:
        return base64.b64decode(raw, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return raw


def recorded(registration: Registration) -> dict[str, Any]:
    """A resource as resources.json keeps it. A VM's or scale set's customData becomes a pointer to its
    decoded copy, ``files/<resource>/cloud-init.yaml``, with the digest of the base64 Azure receives
    (a changed cloud-init still changes the record): the base64 itself reads as nothing to a reviewer
    and was two thirds of the file, 40 KB per scale set."""
    document = registration.as_json()
    raw = _raw_custom_data(registration)
    if raw is not None:
        digest = hashlib.sha256(raw.encode()).hexdigest()[:16]
        document["inputs"] = _replaced(
            document["inputs"],
            VM_TYPES[registration.type],
            f"[base64 of files/{registration.name}/cloud-init.yaml, sha256 {digest}]",
        )
    return document


def _replaced(document: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """A copy of ``document`` with ``value`` at ``path``: the dicts along it copied, the rest shared."""
    head, *rest = path
    return {**document, head: _replaced(document[head], tuple(rest), value) if rest else value}


def kubernetes_object(registration: Registration) -> dict[str, Any] | None:
    """The manifest a pulumi-kubernetes resource applies, as a plain Kubernetes object."""
    if not registration.type.startswith("kubernetes:") or not registration.custom:
        return None
    if registration.type.startswith("kubernetes:helm") or "apiVersion" not in registration.inputs:
        return None
    document = dict(registration.inputs)
    document.pop("__meta", None)
    ordered = {"apiVersion": document.pop("apiVersion"), "kind": document.pop("kind")}
    ordered.update(document)
    return ordered


def collect_files(registrations: list[Registration]) -> dict[str, str]:
    """``{relative path under files/: text}`` for every shipped artifact."""
    files: dict[str, str] = {}
    # The shards of a pool share one cloud-init: decoded once here, parsed once (cloud_init_entries).
    decoded: dict[str, str] = {}
    for registration in registrations:
        raw = _raw_custom_data(registration)
        if raw is not None:
            if raw not in decoded:
                decoded[raw] = _decoded(raw)
            cloud_init = decoded[raw]
            base = registration.name
            files[f"{base}/cloud-init.yaml"] = cloud_init
            for path, entry in cloud_init_entries(cloud_init).items():
                files[f"{base}/{posixpath.normpath('/' + path).lstrip('/')}"] = _file_content(entry)
        if registration.type == IMAGE_TEMPLATE:  # what the machine image build runs, readable
            for step in registration.inputs.get("customize") or []:
                script = machine_image.script_of(step.get("inline") or [])
                if script is not None:
                    files[f"{registration.name}/{step['name']}.sh"] = script
        manifest = kubernetes_object(registration)
        if manifest is not None:
            metadata = manifest.get("metadata") or {}
            namespace = metadata.get("namespace") or "_cluster"
            name = metadata.get("name") or registration.name
            files[f"k8s/{namespace}/{manifest['kind']}-{name}.yaml"] = yaml_text.dump(
                manifest, literal_blocks=True, sort_keys=False, default_flow_style=False
            )
    return files


def _file_content(entry: dict[str, Any]) -> str:
    content = entry.get("content", "")
    if entry.get("encoding") in ("b64", "base64"):
        return base64.b64decode(content).decode()
    return content


def plan_files(registrations: list[Registration], outputs: dict[str, Any], summary: str) -> dict[str, str]:
    """Every file of the plan directory, by relative path."""
    files = {
        "resources.json": json.dumps([recorded(r) for r in registrations], indent=2, sort_keys=False) + "\n",
        "outputs.json": json.dumps(outputs, indent=2, sort_keys=True) + "\n",
        "summary.md": summary,
    }
    files.update({f"files/{relative}": text for relative, text in collect_files(registrations).items()})
    return files


def write_plan(out: Path, files: dict[str, str]) -> None:
    """Writes the plan into ``out`` (which must not exist yet; the caller swaps it in atomically).

    A resource whose files are exactly another's (the shards of a pool share one cloud-init) gets a
    symlink to the first one's directory instead of its own tree: a 30,000-node plan would otherwise
    make 3,500 directories, one mkdir costing up to a quarter of a millisecond on a busy disk. Other
    identical files are written once and hard-linked."""
    out.mkdir(parents=True)
    (out / PLAN_MARKER).write_text(PLAN_MARKER_TEXT)
    made = {""}  # one mkdir per directory
    linked = _link_identical_trees(out, files, made)
    written: dict[str, Path] = {}
    for relative, text in files.items():
        if _tree_of(relative) in linked:
            continue
        _make_directories(out, posixpath.dirname(relative), made)
        target = out / relative
        first = written.get(text)
        if first is None:
            target.write_text(text)
            written[text] = target
        else:
            os.link(first, target)


def _tree_of(relative: str) -> str | None:
    """``files/<resource>`` for a file under a resource's directory, else None."""
    parts = relative.split("/", 2)
    return f"{parts[0]}/{parts[1]}" if len(parts) == 3 and parts[0] == "files" else None


def _link_identical_trees(out: Path, files: dict[str, str], made: set[str]) -> set[str]:
    """Symlinks every resource directory whose files repeat an earlier one's; returns those directories."""
    trees: dict[str, list[tuple[str, str]]] = {}
    for relative, text in files.items():
        tree = _tree_of(relative)
        if tree is not None:
            trees.setdefault(tree, []).append((relative[len(tree) :], text))
    first: dict[tuple[tuple[str, str], ...], str] = {}
    linked = set()
    for tree, contents in trees.items():
        key = tuple(sorted(contents))
        if key in first:
            _make_directories(out, "files", made)
            os.symlink(posixpath.basename(first[key]), out / tree, target_is_directory=True)
            linked.add(tree)
        else:
            first[key] = tree
    return linked


def _make_directories(out: Path, directory: str, made: set[str]) -> None:
    if directory not in made:
        _make_directories(out, posixpath.dirname(directory), made)
        os.mkdir(out / directory)
        made.add(directory)


def holds_plan(directory: Path) -> bool:
    """Whether ``directory`` is a folder this program wrote (it holds the marker), not a link to one."""
    marker = directory / PLAN_MARKER
    return directory.is_dir() and not directory.is_symlink() and marker.is_file() and not marker.is_symlink()
