"""cloud-init user data: the one channel through which a VM receives its files.

A role builds a ``CloudConfig`` (files, commands, disk setup) from plain values;
``render`` serialises it with a real YAML serialiser and ``custom_data`` encodes it
for Azure and enforces Azure's size limit. Nothing secret may be put here: Azure
keeps customData in the VM model in the clear, so secrets come from Key Vault at
boot (see ``infra.boot.secrets``).
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from infra.boot import yaml_text

# Azure rejects customData longer than 87,380 base64 characters ("must be in Base64 encoding
# and with a maximum length of 87380 characters", kubernetes-sigs/cloud-provider-azure#581).
MAX_CUSTOM_DATA_BASE64_CHARS = 87_380
# cloud-init's write_files decodes an entry with this encoding (gzip, then base64) before writing it (cloud-init
# documentation, "Write Files" module, ``encoding``: gz, gzip, gz+base64, gzip+base64, gz+b64, gzip+b64, b64,
# base64). For a program whose text would not otherwise fit in customData.
COMPRESSED = "gz+b64"


@dataclass(frozen=True)
class File:
    path: str
    content: str
    permissions: str = "0644"
    owner: str = "root:root"
    compressed: bool = False  # written as COMPRESSED: a third of its size in customData


@dataclass
class CloudConfig:
    """The parts of #cloud-config that supercluster uses, in the order cloud-init runs them."""

    files: list[File] = field(default_factory=list)
    bootcmd: list[list[str] | str] = field(default_factory=list)  # every boot, early
    runcmd: list[list[str] | str] = field(default_factory=list)  # first boot, last
    # Debian packages the machine's boot scripts use. Declared, never rendered: cloud-init would fetch
    # them from the Ubuntu archive at boot; the machine image carries them (infra/assembly/machine_image.py).
    packages: list[str] = field(default_factory=list)
    apt_sources: dict[str, dict[str, str]] = field(default_factory=dict)
    # cloud-init "mounts" entries; ["ephemeral0"] (no mount point) stops cloud-init mounting Azure's temp disk at /mnt.
    mounts: list[list[str]] = field(default_factory=list)

    def add(self, path: str, content: str, permissions: str = "0644", compressed: bool = False) -> None:
        if any(existing.path == path for existing in self.files):
            raise ValueError(f"cloud-init: {path} is written twice")
        self.files.append(File(path, content, permissions, compressed=compressed))

    def with_content(self, path: str, content: str) -> CloudConfig:
        """A copy in which the file at ``path`` (which must be there) holds ``content`` instead."""
        if not any(existing.path == path for existing in self.files):
            raise ValueError(f"cloud-init: {path} is not written")
        return replace(
            self,
            files=[replace(f, content=content) if f.path == path else f for f in self.files],
            bootcmd=list(self.bootcmd),
            runcmd=list(self.runcmd),
            packages=list(self.packages),
            apt_sources=dict(self.apt_sources),
            mounts=list(self.mounts),
        )


def render(config: CloudConfig) -> str:
    """The #cloud-config text: the document ``document(config)`` dumps to, built section by section.

    Each file's ``write_files`` entry is serialised once per distinct file (``_file_entry``) and
    joined under the key: the machines of a role and the shards of a pool share most of their files,
    and PyYAML's representer is most of a render's cost (a 30,000-node plan renders 256 cloud-inits).
    A block sequence under a top-level key sits at the key's own indentation, so the joined text is
    the whole document's dump byte for byte (tests/infra/test_cloudinit_render.py). The entries
    themselves are not built here (``_sections``): a compressed file's is its gzip, made once per
    distinct file by ``_file_entry``, not once per render."""
    return rendered(config)[0]


def rendered(config: CloudConfig) -> tuple[str, tuple[str, ...]]:
    """``render(config)`` and the ``write_files`` items it joined, each one item's text in order: whoever reads
    the text back (the offline plan, 243 InfiniBand shards' texts at 30,000 nodes) can take the items
    (``custom_data``'s ``write_files``) instead of finding them in the text again."""
    sections = []
    items: tuple[str, ...] = ()
    for key, value in _sections(config).items():
        if key == "write_files":
            items = tuple(_file_entry(f) for f in value)
            sections.append("write_files:\n" + "".join(items))
        else:
            sections.append(_section(key, value))
    return "#cloud-config\n" + ("".join(sections) if sections else _body({})), items


def document(config: CloudConfig) -> dict[str, Any]:
    """The cloud-config document as plain data, keys in the order cloud-init runs them."""
    return {
        key: [_entry(f) for f in value] if key == "write_files" else value for key, value in _sections(config).items()
    }


def _sections(config: CloudConfig) -> dict[str, Any]:
    """The document's sections in order, ``write_files`` as the files themselves (sorted by path), not entries."""
    sections: dict[str, Any] = {}
    if config.apt_sources:
        sections["apt"] = {"sources": config.apt_sources}
    if config.bootcmd:
        sections["bootcmd"] = list(config.bootcmd)
    if config.mounts:
        sections["mounts"] = [list(entry) for entry in config.mounts]
    if config.files:
        sections["write_files"] = _in_order(config.files)
    if config.runcmd:
        sections["runcmd"] = list(config.runcmd)
    return sections


def _in_order(files: list[File]) -> list[File]:
    return sorted(files, key=lambda f: f.path)


def _entry(f: File) -> dict[str, str]:
    if f.compressed:  # mtime 0: the same text always renders the same bytes
        packed = base64.b64encode(gzip.compress(f.content.encode(), mtime=0)).decode()
        return {
            "path": f.path,
            "owner": f.owner,
            "permissions": f.permissions,
            "encoding": COMPRESSED,
            "content": packed,
        }
    return {"path": f.path, "owner": f.owner, "permissions": f.permissions, "content": f.content}


# Bounded: a test process renders many clusters. A 30,000-node plan has about 600 distinct files.
@functools.lru_cache(maxsize=4096)
def _file_entry(f: File) -> str:
    """One ``write_files`` entry as the block-sequence item the whole document's dump writes for it."""
    return _body([_entry(f)])


def _section(key: str, value: Any) -> str:
    """``{key: value}`` as the whole document's dump writes that section: serialised once per distinct value
    (``_section_text``; the shards of a pool run the same commands) when the value is plain data holding no
    list or dict twice. One held twice is written once with an anchor and then as an alias, which depends on
    which objects are the same, not only on their values: such a value is serialised as it is."""
    frozen = _frozen(value, set())
    return _body({key: value}) if frozen is None else _section_text(key, frozen)


class _Unfrozen(Exception):
    """A value ``_frozen`` cannot stand for by value."""


def _frozen(value: Any, seen: set[int]) -> Any:
    """``value`` as a hashable key that ``_thawed`` turns back into an equal value, each type kept (``True`` is
    not ``1``), or None when it is not plain data (str, int, bool, None, lists, dicts) or holds a list or dict
    twice."""
    try:
        return _freeze(value, seen)
    except _Unfrozen:
        return None


def _freeze(value: Any, seen: set[int]) -> Any:
    kind = type(value)
    if kind is str:
        return value
    if kind is list or kind is dict:
        if id(value) in seen:
            raise _Unfrozen
        seen.add(id(value))
        if kind is list:
            return (list, tuple(_freeze(item, seen) for item in value))
        return (dict, tuple((_freeze(k, seen), _freeze(v, seen)) for k, v in value.items()))
    if kind is int or kind is bool or value is None:
        return (kind, value)
    raise _Unfrozen


def _thawed(frozen: Any) -> Any:
    if type(frozen) is str:
        return frozen
    kind, content = frozen
    if kind is list:
        return [_thawed(item) for item in content]
    if kind is dict:
        return {_thawed(k): _thawed(v) for k, v in content}
    return content


# Bounded: a test process renders many clusters. A 30,000-node plan has a handful of distinct sections.
@functools.lru_cache(maxsize=512)
def _section_text(key: str, frozen: Any) -> str:
    return _body({key: _thawed(frozen)})


def dump(document: dict[str, Any], dumper: type[yaml.SafeDumper] = yaml_text.LiteralBlockDumper) -> str:
    """A #cloud-config document as text, multi-line strings as literal blocks (reads like the files)."""
    return "#cloud-config\n" + _body(document, dumper)


def _body(document: Any, dumper: type[yaml.SafeDumper] = yaml_text.LiteralBlockDumper) -> str:
    text: str = yaml.dump(document, Dumper=dumper, sort_keys=False, width=4096, default_flow_style=False)
    return text


class CustomData(str):
    """Base64 for Azure's customData, with the text it encodes beside it (``text``) and, where the caller gives
    them, the ``write_files`` items ``rendered`` joined into that text (``write_files``): whoever reads a request
    back (the offline plan reads every machine's cloud-init from the customData it sends, 19 MB of base64 in a
    30,000-node plan) can take the text instead of decoding it. A value, not a cache: it is the base64 string
    itself wherever a string goes, and keeps nothing anywhere else."""

    __slots__ = ("text", "write_files")
    text: str
    write_files: tuple[str, ...]


def custom_data(text: str, what: str, write_files: tuple[str, ...] = ()) -> CustomData:
    """Base64 for Azure's customData; refuses anything Azure would refuse. ``write_files``: the items
    ``rendered`` gave with ``text``, carried along for whoever reads the text back."""
    encoded = CustomData(base64.b64encode(text.encode()).decode())
    if len(encoded) > MAX_CUSTOM_DATA_BASE64_CHARS:
        raise ValueError(
            f"{what}: cloud-init is {len(encoded)} base64 characters, over Azure's "
            f"customData limit of {MAX_CUSTOM_DATA_BASE64_CHARS}"
        )
    encoded.text = text
    encoded.write_files = write_files
    return encoded


def fingerprint(text: str) -> str:
    """A short digest of rendered cloud-init, tagged on machines so a preview shows model changes."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]
