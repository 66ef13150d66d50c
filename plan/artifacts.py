"""Turns a program run into the plan directory: resources, outputs, and every file a machine receives.

Files are decoded from what the program actually declared (a VM's or scale set's
customData, a Kubernetes object's inputs), never re-rendered on the side, so the
plan cannot drift from ``pulumi up``.
"""

from __future__ import annotations

import base64
import binascii
import functools
import gzip
import hashlib
import os
import posixpath
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from infra.assembly import machine_image
from infra.boot import yaml_text
from infra.boot.cloudinit import COMPRESSED
from plan.json_text import json_text
from plan.mocks import SECRET, VM_TYPES, Registration

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: 10x faster
IMAGE_TEMPLATE = "azure-native:virtualmachineimages:VirtualMachineImageTemplate"
# Written into every plan directory: ``--out`` replaces an existing folder only when it holds this file
# (a plan this program wrote), so a mistyped --out (``.``, a home directory, a user's folder) is never deleted.
PLAN_MARKER = ".supercluster-plan"
_NONE_KNOWN: Mapping[str, Any] = MappingProxyType({})  # no customData whose text is known: every one decoded
PLAN_MARKER_TEXT = "Written by `python -m plan`: a later `python -m plan --out` may replace this folder.\n"


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
    return {path: file_content(entry) for path, entry in cloud_init_entries(cloud_init).items()}


@functools.lru_cache(maxsize=64)
def cloud_init_entries(cloud_init: str, rendered_items: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    """``{machine path: write_files entry}`` of a cloud-init, parsed once per distinct text (the shards of a
    pool share theirs) and, where the text is laid out block by block, each entry once per distinct entry
    text (``_write_files_items``): the shards of an InfiniBand pool differ in one file of forty, and PyYAML's
    constructor is most of a plan's reading time. ``rendered_items``: the items ``cloudinit.rendered`` joined
    into the text, where known (``_rendered_items``). Shared between callers: read it, never change it."""
    items = _rendered_items(cloud_init, rendered_items)
    if items is None:
        items = _write_files_items(cloud_init)
    parsed = [] if items is None else [_entry(item) for item in items]
    entries = [entry for entry in parsed if entry is not None]
    if items is None or len(entries) < len(parsed):
        document = yaml.load(cloud_init, Loader=_Loader) or {}
        entries = document.get("write_files") or []
    return {entry["path"]: entry for entry in entries}


_WRITE_FILES = "\nwrite_files:\n"


def _rendered_items(cloud_init: str, items: tuple[str, ...]) -> list[str] | None:
    """``items``, the ``write_files`` items ``cloudinit.rendered`` joined into ``cloud_init``, where the text
    holds exactly them, one after the other, right below its ``write_files`` key and up to the next
    top-level key: what ``_write_files_items`` finds in a text ``render`` wrote (one key, block style), without
    reading every line of it again (tests/stacks/test_performance.py compares them). None for any other
    text."""
    start = cloud_init.find(_WRITE_FILES) + len(_WRITE_FILES) if items else -1
    if start < len(_WRITE_FILES):
        return None  # no items, or no write_files key
    for item in items:
        if not cloud_init.startswith(item, start):
            return None
        start += len(item)
    after = _TOP_LEVEL.match(cloud_init, start) if start < len(cloud_init) else None
    if start < len(cloud_init) and (after is None or not after["key"]):
        return None  # the section goes on past the items
    return list(items)


def cloud_init_pieces(encoded: Mapping[str, str], write_files: Mapping[str, tuple[str, ...]]) -> dict[str, list[str]]:
    """For the secret scan (``scan_files``' ``cuts``): each cloud-init whose write_files items are known
    (``ProgramRun.write_files``, where the text holds exactly them: ``_rendered_items``), cut right before each
    item, the last item with the rest of the text: every cut is after a newline that opens an item's ``- `` line,
    as the scan cuts, found without reading the text again."""
    pieces = {}
    for raw, items in write_files.items():
        text = encoded.get(raw)
        if text is not None and _rendered_items(text, items) is not None:
            start = text.find(_WRITE_FILES) + len(_WRITE_FILES)
            end = start + sum(map(len, items))
            pieces[text] = [text[:start], *items[:-1], items[-1] + text[end:]]
    return pieces


# An unindented line, found from the newline before it (a literal: the regex engine jumps between them) ...
_UNINDENTED = re.compile(r"\n(?=\S)")
# ... starts a top-level node: a key with its value on the lines below, a sequence item, or anything else.
_TOP_LEVEL = re.compile(r"(?P<key>[A-Za-z_][A-Za-z0-9_-]*):\n|(?P<item>- )|(?P<other>\S)")


def _write_files_items(cloud_init: str) -> list[str] | None:
    """The texts of the items of the top-level ``write_files`` block sequence, each as a one-item YAML
    document, or None when the text is not plainly block-style (a flow collection, a quoted key, a comment,
    ``write_files`` twice or its items indented): then it is parsed whole. In block style every line of a
    nested node is indented, and a sequence under a top-level key is written at the key's own indentation,
    so each unindented ``- `` line below ``write_files:`` starts one of its items (what
    ``infra.boot.cloudinit.render`` writes)."""
    if cloud_init[:1].isspace():
        return None  # a document that opens indented (or with a blank line)
    items: list[str] = []
    offsets = [0] + [newline.end() for newline in _UNINDENTED.finditer(cloud_init)]
    starts = [match for match in (_TOP_LEVEL.match(cloud_init, offset) for offset in offsets) if match]
    section = None
    seen = False
    for index, match in enumerate(starts):
        end = starts[index + 1].start() if index + 1 < len(starts) else len(cloud_init)
        if match["key"]:
            section = match["key"]
            if section == "write_files":
                if seen or end != match.end():  # twice, or its items indented below it
                    return None
                seen = True
        elif match["item"]:
            if section == "write_files":
                items.append(cloud_init[match.start() : end])
        elif not (index == 0 and match.start() == 0 and cloud_init.startswith("#")):
            return None  # only a leading comment (#cloud-config) is neither a key nor an item
    return items


@functools.lru_cache(maxsize=4096)
def _entry(item: str) -> dict[str, Any] | None:
    """One ``write_files`` item, or None if it does not parse alone as one (an alias to another item's anchor)."""
    try:
        parsed = yaml.load(item, Loader=_Loader)
    except yaml.YAMLError:
        return None
    return parsed[0] if isinstance(parsed, list) and len(parsed) == 1 and isinstance(parsed[0], dict) else None


def _decoded(raw: str, encoded: Mapping[str, str] = _NONE_KNOWN) -> str:
    """``raw`` decoded, or as it is if it is not base64 of UTF-8 text. ``encoded`` holds the text behind each
    customData the run saw the program encode (``ProgramRun.encoded``, by the very base64 the request carries):
    base64 of a text's UTF-8 is that text's only, so looking it up gives what decoding would."""
    known = encoded.get(raw)
    if known is not None:
        return known
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


def collect_files(
    registrations: list[Registration],
    encoded: Mapping[str, str] = _NONE_KNOWN,
    write_files: Mapping[str, tuple[str, ...]] = _NONE_KNOWN,
) -> dict[str, str]:
    """``{relative path under files/: text}`` for every shipped artifact; ``encoded`` as ``_decoded`` takes it,
    ``write_files`` the items each of those texts was joined from, by the same base64 (``ProgramRun``)."""
    files: dict[str, str] = {}
    # The shards of a pool share one cloud-init: decoded once here, parsed once (cloud_init_entries). The
    # shards of an InfiniBand pool differ in one file of forty, whose entries cloud_init_entries shares
    # between them: each entry's text is decoded once (``texts``, by the entry, kept so its id stays its
    # own), each machine path made relative once (``relative``).
    decoded: dict[str, str] = {}
    texts: dict[int, tuple[dict[str, Any], str]] = {}
    relative: dict[str, str] = {}
    for registration in registrations:
        raw = _raw_custom_data(registration)
        if raw is not None:
            if raw not in decoded:
                decoded[raw] = _decoded(raw, encoded)
            cloud_init = decoded[raw]
            base = registration.name
            files[f"{base}/cloud-init.yaml"] = cloud_init
            for path, entry in cloud_init_entries(cloud_init, write_files.get(raw, ())).items():
                known = texts.get(id(entry))
                if known is None:
                    known = texts[id(entry)] = (entry, file_content(entry))
                if path not in relative:
                    relative[path] = posixpath.normpath("/" + path).lstrip("/")
                files[f"{base}/{relative[path]}"] = known[1]
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


def file_content(entry: dict[str, Any]) -> str:
    """The text a ``write_files`` entry writes on the machine (plain, base64, or gzip then base64)."""
    content = entry.get("content", "")
    if entry.get("encoding") in ("b64", "base64"):
        return base64.b64decode(content).decode()
    if entry.get("encoding") == COMPRESSED:
        return gzip.decompress(base64.b64decode(content)).decode()
    return content


def plan_files(
    registrations: list[Registration],
    outputs: dict[str, Any],
    summary: str,
    encoded: Mapping[str, str] = _NONE_KNOWN,
    write_files: Mapping[str, tuple[str, ...]] = _NONE_KNOWN,
) -> dict[str, str]:
    """Every file of the plan directory, by relative path; ``encoded`` and ``write_files`` as ``collect_files``
    takes them."""
    files = {
        "resources.json": json_text([recorded(r) for r in registrations]) + "\n",
        "outputs.json": json_text(outputs, sort_keys=True) + "\n",
        "summary.md": summary,
    }
    files.update(
        {f"files/{relative}": text for relative, text in collect_files(registrations, encoded, write_files).items()}
    )
    return files


def write_plan(out: Path, files: dict[str, str]) -> None:
    """Writes the plan into ``out`` (which must not exist yet; the caller swaps it in atomically).

    A directory under a resource's files that holds exactly what the same directory of an earlier
    resource holds is a symlink to it: the shards of a pool share one cloud-init, and an InfiniBand
    pool's shards differ only in their cloud-init and kubelet's unit, so all but those and the
    directories above them are links. A 30,000-node plan would otherwise make 4,200 directories and
    10,000 files, each one a syscall or three. Other identical files are written once and hard-linked."""
    out.mkdir(parents=True)
    root = str(out)
    _write(f"{root}/{PLAN_MARKER}", PLAN_MARKER_TEXT.encode())
    tree: dict[str, Any] = {}  # {name: text, or a directory's dict}
    folders: dict[str, dict[str, Any]] = {"": tree}  # each directory's dict by its path, made when first named
    for relative, text in files.items():
        folder, _, name = relative.rpartition("/")
        node = folders.get(folder)
        if node is None:
            node = _folder(folders, folder)
        node[name] = text
    written: dict[str, str] = {}
    known: dict[int, tuple[Any, ...]] = {}
    for name, node in tree.items():
        if name == "files" and isinstance(node, dict):
            os.mkdir(f"{root}/files")
            seen: dict[tuple[str, tuple[Any, ...]], str] = {}
            for resource, files_of in node.items():
                _write_tree(root, f"files/{resource}", "", files_of, seen, written, known)
        else:
            _write_tree(root, name, "", node, {}, written, known)


def _folder(folders: dict[str, dict[str, Any]], path: str) -> dict[str, Any]:
    """The dict of the directory at ``path``, made (and the ones above it) if it is not in ``folders`` yet."""
    node = folders.get(path)
    if node is None:
        parent, _, name = path.rpartition("/")
        node = folders[path] = _folder(folders, parent).setdefault(name, {})
    return node


def _write_tree(
    root: str,
    relative: str,
    inside: str,
    node: Any,
    seen: dict[tuple[str, tuple[Any, ...]], str],
    written: dict[str, str],
    known: dict[int, tuple[Any, ...]],
) -> None:
    """Writes ``node`` (a text, or a directory's dict) at ``relative``; ``inside`` is its path within its
    resource's directory, ``seen`` the first directory written for each (``inside``, contents), ``written``
    the first file written for each text, ``known`` each directory's contents (``_contents``)."""
    if not isinstance(node, dict):
        first = written.get(node)
        if first is None:
            _write(f"{root}/{relative}", node.encode())
            written[node] = f"{root}/{relative}"
        else:
            os.link(first, f"{root}/{relative}")
        return
    first_directory = seen.setdefault((inside, _contents(node, known)), relative)
    if first_directory != relative:
        link = _relative_path(first_directory, posixpath.dirname(relative))
        os.symlink(link, f"{root}/{relative}", target_is_directory=True)
        return
    os.mkdir(f"{root}/{relative}")
    for name, child in node.items():
        _write_tree(root, f"{relative}/{name}", f"{inside}/{name}", child, seen, written, known)


def _relative_path(path: str, start: str) -> str:
    """``posixpath.relpath(path, start)`` for two paths below the same folder: from their names alone, where
    ``relpath`` asks the process's working directory twice to make both absolute first (17 µs against 1.5; a
    30,000-node plan makes 1,959 links). Any other pair (a ``.``, ``..`` or empty name) goes to ``relpath``."""
    names, start_names = path.split("/"), start.split("/")
    if {"", ".", ".."} & {*names, *start_names}:
        return posixpath.relpath(path, start)
    common = 0
    while common < min(len(names), len(start_names)) and names[common] == start_names[common]:
        common += 1
    return "/".join([".."] * (len(start_names) - common) + names[common:]) or "."


def _contents(node: dict[str, Any], known: dict[int, tuple[Any, ...]]) -> tuple[Any, ...]:
    """A directory's whole contents, comparable and hashable: its entries by name, nested. Each
    directory's is computed once (``known``, by the directory's dict) and kept on it for the ones below."""
    key = known.get(id(node))
    if key is None:
        entries = (
            (name, _contents(child, known) if isinstance(child, dict) else child) for name, child in node.items()
        )
        key = known[id(node)] = tuple(sorted(entries))
    return key


def _write(path: str, data: bytes) -> None:
    """One new file: a single open, write and close (``Path.write_text`` adds a text layer per file)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(descriptor, view) :]
    finally:
        os.close(descriptor)


def holds_plan(directory: Path) -> bool:
    """Whether ``directory`` is a folder this program wrote (it holds the marker), not a link to one."""
    marker = directory / PLAN_MARKER
    return directory.is_dir() and not directory.is_symlink() and marker.is_file() and not marker.is_symlink()
