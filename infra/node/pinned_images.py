"""Images a node holds, pinned, before kubelet starts: the pause image and ``images.preload``.

The 2,500-node post: a node whose pull of the pod infrastructure (pause) image failed, for
example on a registry's per-IP quota behind NAT, could start no pod at all; OpenAI baked it
and their big images into the machine image. So does supercluster: the machine image carries
each of them as an archive (``archive_path``, written by infra/assembly/machine_image.py), and a
booting node imports it into containerd (whose root is on the local SSD, blank after a
reallocation). Only an image the archive lacks (a machine image older than the list) is
pulled, from the cluster's own Azure Container Registry over its private endpoint
(components/image_registry.py). Each is pinned (``io.cri-containerd.pinned``), which
kubelet's image GC respects (kubernetes#119986). containerd's ``sandbox_image`` is the same
reference, already present.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import machine
from infra.boot import systemd
from infra.boot.cloudinit import CloudConfig
from infra.catalog.image_refs import parse_image
from infra.node import containerd

UNIT = "supercluster-preload-images.service"
SCRIPT_PATH = "/usr/local/sbin/supercluster-preload-images"
MANIFEST_PATH = "/etc/supercluster/preload-images.json"
# kubelet's image credential provider for the cluster's registry (infra/node/kubelet.py); the preload
# asks it for a registry token the way kubelet does.
# Beside the node's other supercluster tools; kubelet runs only the provider its config names.
CREDENTIAL_PROVIDER_DIR = "/usr/local/sbin"
CREDENTIAL_PROVIDER = "supercluster-acr-credential-provider"
# In the machine image: one `ctr images export` archive per preloaded image.
ARCHIVE_DIR = "/var/lib/supercluster/image-archives"


def archive_path(reference: str) -> str:
    """Where the machine image holds this image's archive."""
    return f"{ARCHIVE_DIR}/{hashlib.sha256(reference.encode()).hexdigest()[:16]}.tar"


def manifest(registry_login_server: str, images: tuple[str, ...]) -> dict[str, Any]:
    entries = []
    for reference in dict.fromkeys(images):  # deduplicated, in order
        ref = parse_image(reference)
        if ref is None:
            raise ValueError(f"{reference}: not a pinned image from a registry the cluster caches")
        entries.append(
            {"source": str(ref), "archive": archive_path(str(ref)), "cached": ref.cached_in(registry_login_server)}
        )
    return {
        "registry": registry_login_server,
        "credential_provider": f"{CREDENTIAL_PROVIDER_DIR}/{CREDENTIAL_PROVIDER}",
        "images": entries,
    }


def add_preload(cloud: CloudConfig, registry_login_server: str, images: tuple[str, ...]) -> None:
    cloud.add(SCRIPT_PATH, machine.source("node/preload_images.py"), permissions="0755", compressed=True)
    cloud.add(MANIFEST_PATH, json.dumps(manifest(registry_login_server, images), indent=1) + "\n")
    cloud.add(
        f"/etc/systemd/system/{UNIT}",
        systemd.unit(
            "Load and pin the pause image and images.preload from the machine image",
            [SCRIPT_PATH, MANIFEST_PATH],
            after=[containerd.UNIT, "network-online.target"],
            requires=[containerd.UNIT],
            wants=["network-online.target"],
            service={"Type": "oneshot", "RemainAfterExit": "true", "Restart": "no"},
            unit_extra={"Before": "kubelet.service"},
        ),
    )
