"""Turns a program run into the plan directory: resources, outputs, and every file a machine receives.

Files are decoded from what the program actually declared (a VM's or scale set's
customData, a Kubernetes object's inputs), never re-rendered on the side, so the
plan cannot drift from ``pulumi up``.
"""

from __future__ import annotations

import base64
import binascii
import json
import posixpath
from pathlib import Path
from typing import Any

import yaml

from infra.plan.mocks import SECRET, Registration

VM_TYPES = {
    "azure-native:compute:VirtualMachine": ("osProfile", "customData"),
    "azure-native:compute:VirtualMachineScaleSet": ("virtualMachineProfile", "osProfile", "customData"),
}


def custom_data_of(registration: Registration) -> str | None:
    """The decoded cloud-init of a VM or scale set, or None for other resources."""
    path = VM_TYPES.get(registration.type)
    if path is None:
        return None
    value: Any = registration.inputs
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    if not isinstance(value, str) or value == SECRET:
        return None
    try:
        return base64.b64decode(value, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return value


def kubernetes_object(registration: Registration) -> dict[str, Any] | None:
    """The manifest a pulumi-kubernetes resource applies, as a plain Kubernetes object."""
    if not registration.type.startswith("kubernetes:") or not registration.custom:
        return None
    if registration.type.startswith("kubernetes:helm") or "apiVersion" not in registration.inputs:
        return None
    document = _whole_numbers(dict(registration.inputs))
    document.pop("__meta", None)
    ordered = {"apiVersion": document.pop("apiVersion"), "kind": document.pop("kind")}
    ordered.update(document)
    return ordered


def _whole_numbers(value: Any) -> Any:
    """The engine's wire format carries every number as a double; Kubernetes integers are integers."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole_numbers(v) for v in value]
    return value


def collect_files(registrations: list[Registration]) -> dict[str, str]:
    """``{relative path under files/: text}`` for every shipped artifact."""
    files: dict[str, str] = {}
    for registration in registrations:
        cloud_init = custom_data_of(registration)
        if cloud_init is not None:
            base = registration.name
            files[f"{base}/cloud-init.yaml"] = cloud_init
            document = yaml.safe_load(cloud_init) or {}
            for entry in document.get("write_files") or []:
                machine_path = posixpath.normpath("/" + entry["path"]).lstrip("/")
                files[f"{base}/{machine_path}"] = _file_content(entry)
        manifest = kubernetes_object(registration)
        if manifest is not None:
            metadata = manifest.get("metadata") or {}
            namespace = metadata.get("namespace") or "_cluster"
            name = metadata.get("name") or registration.name
            files[f"k8s/{namespace}/{manifest['kind']}-{name}.yaml"] = yaml.safe_dump(
                manifest, sort_keys=False, default_flow_style=False)
    return files


def _file_content(entry: dict[str, Any]) -> str:
    content = entry.get("content", "")
    if entry.get("encoding") in ("b64", "base64"):
        return base64.b64decode(content).decode()
    return content


def write_plan(out: Path, registrations: list[Registration], outputs: dict[str, Any], summary: str) -> None:
    """Writes the plan into ``out`` (which must not exist yet; the caller swaps it in atomically)."""
    out.mkdir(parents=True)
    (out / "resources.json").write_text(
        json.dumps([r.as_json() for r in registrations], indent=2, sort_keys=False) + "\n")
    (out / "outputs.json").write_text(json.dumps(outputs, indent=2, sort_keys=True) + "\n")
    for relative, text in collect_files(registrations).items():
        target = out / "files" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    (out / "summary.md").write_text(summary)
