"""The boot script that installs the control-plane binaries, each verified before it is used.

- kube-apiserver and kube-controller-manager come from dl.k8s.io at ``kubernetesVersion`` and are
  checked against the ``.sha256`` published next to each binary. That catches a truncated or
  corrupted download, not a compromised dl.k8s.io: ``kubernetesVersion`` is any patch release, and
  the program (planned offline) cannot record their checksums ahead of time.
- kube-scheduler comes from the scheduler-plugins image, pulled by its manifest-list digest, which
  is recorded in ``infra/catalog/versions.py``: skopeo refuses a manifest that does not match the digest
  and every layer that does not match the manifest, so this binary is pinned end to end.

``install_script`` runs once, when the machine image is built (infra/assembly/machine_image.py); it is
idempotent and replaces files atomically. A booting apiserver runs ``verify_script`` instead: it
downloads nothing and refuses to start the control plane on an image built for other pins.
"""

from __future__ import annotations

import shlex

from infra.control_plane import paths
from infra.control_plane.scheduler import scheduler_image

RELEASE_URL = "https://dl.k8s.io/release/v{version}/bin/linux/amd64/{binary}"
RELEASE_BINARIES = ("kube-apiserver", "kube-controller-manager")
SCHEDULER_PATH_IN_IMAGE = "bin/kube-scheduler"  # the image's entrypoint (build/scheduler/Dockerfile)
# Written by install_script beside kube-scheduler: the image@digest it was unpacked from.
SCHEDULER_SOURCE = f"{paths.BIN_DIR}/kube-scheduler.source"
PACKAGES = ("skopeo",)

_FUNCTIONS = r"""
download() {  # download URL FILE
  curl -fsSL --retry 10 --retry-delay 3 --retry-all-errors -o "$2" "$1"
}
install_release_binary() {  # install_release_binary URL DEST (verified against URL.sha256)
  local name
  [ -x "$2" ] && return 0
  name=$(basename "$2")
  download "$1" "$tmp/$name"
  download "$1.sha256" "$tmp/$name.sha256"
  echo "$(tr -d '[:space:]' < "$tmp/$name.sha256")  $tmp/$name" | sha256sum --check --strict --quiet
  install -m 0755 "$tmp/$name" "$2.new"
  mv -f "$2.new" "$2"
}
install_image_binary() {  # install_image_binary IMAGE@DIGEST PATH_IN_IMAGE DEST
  local layer
  [ -x "$3" ] && return 0
  rm -rf "$tmp/image" "$tmp/rootfs"
  skopeo copy --quiet --override-os linux --override-arch amd64 "docker://$1" "dir:$tmp/image"
  mkdir -p "$tmp/rootfs"
  for layer in $(python3 -c 'import json, sys
for layer in json.load(open(sys.argv[1]))["layers"]:
    print(layer["digest"].split(":", 1)[1])' "$tmp/image/manifest.json"); do
    tar -xf "$tmp/image/$layer" -C "$tmp/rootfs" --no-same-owner
  done
  install -m 0755 "$tmp/rootfs/$2" "$3.new"
  mv -f "$3.new" "$3"
}
"""


def install_script(kubernetes_version: str) -> str:
    image, tag, digest = scheduler_image(kubernetes_version)
    lines = [
        "#!/bin/bash",
        "# Written by supercluster: installs the pinned control-plane binaries, each verified",
        "# (see infra/control_plane/install.py in the supercluster repository).",
        "set -euo pipefail",
        "tmp=$(mktemp -d)",
        "trap 'rm -rf \"$tmp\"' EXIT",
        _FUNCTIONS.strip("\n"),
    ]
    for binary in RELEASE_BINARIES:
        url = RELEASE_URL.format(version=kubernetes_version, binary=binary)
        lines.append(f"install_release_binary {shlex.quote(url)} {paths.BIN_DIR}/{binary}")
    lines.append(f"# scheduler-plugins {tag}")
    lines.append(
        f"install_image_binary {shlex.quote(f'{image}@{digest}')} {SCHEDULER_PATH_IN_IMAGE} "
        f"{paths.BIN_DIR}/kube-scheduler"
    )
    lines.append(f"echo {shlex.quote(f'{image}@{digest}')} > {SCHEDULER_SOURCE}")
    return "\n".join(lines) + "\n"


def verify_script(kubernetes_version: str) -> str:
    """At boot: each control-plane binary is the machine image's, at exactly the pinned version."""
    image, _, digest = scheduler_image(kubernetes_version)
    q = shlex.quote
    lines = [
        "#!/bin/bash",
        "# Written by supercluster: checks the control-plane binaries the machine image carries",
        "# (see infra/control_plane/install.py in the supercluster repository). Downloads nothing.",
        "set -euo pipefail",
        'fail() { echo "control plane: $1; boot a machine image built for these pins (docs/node-image.md)" >&2; '
        "exit 1; }",
    ]
    for binary in RELEASE_BINARIES:
        path = f"{paths.BIN_DIR}/{binary}"
        want = f"Kubernetes v{kubernetes_version}"
        lines.append(f'[ "$({path} --version 2>&1)" = {q(want)} ] || fail {q(f"{binary} is not {want}")}')
    source = f"{image}@{digest}"
    lines.append(
        f"[ -x {paths.BIN_DIR}/kube-scheduler ] && "
        f'[ "$(cat {SCHEDULER_SOURCE} 2>/dev/null)" = {q(source)} ] '
        f"|| fail {q(f'kube-scheduler is not from {source}')}"
    )
    return "\n".join(lines) + "\n"
