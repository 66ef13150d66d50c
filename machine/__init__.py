"""The programs that run on the machines (and in the add-on pods on them), shipped verbatim.

Each file here is delivered as a file: written by cloud-init (``infra/boot/cloudinit.py``) or mounted
from a ConfigMap, then executed by systemd or a container. So every program is one file that
needs only what the machine already has: Python 3's standard library (plus PyYAML for the etcd
member tool, which Ubuntu's cloud-init depends on) or bash. A renderer reads a program's text
with ``source`` and writes the settings it needs into the program's config or environment file;
the program itself imports nothing from this repository.

- ``etcd/``: ``member.py``, the etcd member tool (disk, start decision, backup, restore, metrics).
- ``node/``: a node's boot programs (binary install, local disks, image preload, provider ID, GPU check).
- ``addons/``: programs the add-on pods run on every node (GPU health, node taint, iptables exporter).
- ``shared/``: used by every machine (the IMDS token helper of the secrets fetcher).
- ``control_plane/``: an apiserver's boot program (``serving_identity.py``: its address and serving
  certificate), the kubelet-serving CSR approver every apiserver runs (``csr_approver.py``) and the
  on-demand admin credential's signer (``sign_client.py``), which Azure Run Command sends to an apiserver
  VM and never installs.
"""

from __future__ import annotations

from pathlib import Path

PROGRAMS_DIR = Path(__file__).parent


def path(name: str) -> Path:
    """A program's file, by its path under ``machine/`` (e.g. ``"node/install.py"``)."""
    found = PROGRAMS_DIR / name
    if not found.is_file():
        raise FileNotFoundError(f"no machine program {name!r} under {PROGRAMS_DIR}")
    return found


def source(name: str) -> str:
    """A program's text, as the machine receives it."""
    return path(name).read_text()
