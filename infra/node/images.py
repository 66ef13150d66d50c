"""Images a node holds, pinned, before kubelet starts: the pause image and ``images.preload``.

The 2,500-node post: a node whose pull of the pod infrastructure (pause) image failed, for
example on a registry's per-IP quota behind NAT, could start no pod at all; OpenAI baked it
and their big images into the machine image. supercluster uses marketplace images (keeping
1,000-VM scale sets), so each node instead pulls them at boot from the cluster's own Azure
Container Registry, which caches the upstream registries (components/image_registry.py),
and pins them (``io.cri-containerd.pinned``), which kubelet's image GC respects
(kubernetes#119986). containerd's ``sandbox_image`` is the same reference, already present.
"""

from __future__ import annotations

import json
from typing import Any

import machine
from infra import systemd
from infra.cloudinit import CloudConfig
from infra.images import parse_image
from infra.node import containerd

UNIT = "supercluster-preload-images.service"
SCRIPT_PATH = "/usr/local/sbin/supercluster-preload-images"
MANIFEST_PATH = "/etc/supercluster/preload-images.json"


def manifest(registry_login_server: str, images: tuple[str, ...]) -> dict[str, Any]:
    entries = []
    for reference in dict.fromkeys(images):  # deduplicated, in order
        ref = parse_image(reference)
        if ref is None:
            raise ValueError(f"{reference}: not a pinned image from a registry the cluster caches")
        entries.append({"source": str(ref), "cached": ref.cached_in(registry_login_server)})
    return {"registry": registry_login_server, "images": entries}


def add_preload(cloud: CloudConfig, registry_login_server: str, images: tuple[str, ...]) -> None:
    cloud.add(SCRIPT_PATH, machine.source("node/preload_images.py"),
              permissions="0755")
    cloud.add(MANIFEST_PATH, json.dumps(manifest(registry_login_server, images), indent=1) + "\n")
    cloud.add(f"/etc/systemd/system/{UNIT}", systemd.unit(
        "Preload and pin the pause image and images.preload from the cluster's registry",
        [SCRIPT_PATH, MANIFEST_PATH],
        after=[containerd.UNIT, "network-online.target"],
        requires=[containerd.UNIT],
        wants=["network-online.target"],
        service={"Type": "oneshot", "RemainAfterExit": "true", "Restart": "no"},
        unit_extra={"Before": "kubelet.service"},
    ))
