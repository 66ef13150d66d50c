"""The binaries a node runs, pinned and verified: containerd, runc, CNI plugins, kubelet, kube-proxy.

The manifest (a pure function of the Kubernetes version and ``infra/catalog/versions.py``) lists
each artifact's URL, its sha256 (pinned, or the ``.sha256`` file Kubernetes publishes
beside its binaries, the check kubernetes.io documents for them) and the version the
installed binary must report. ``machine/node/install.py`` applies it twice: with the whole
manifest when the machine image is built (infra/assembly/machine_image.py), and on every boot with
``boot_manifest``, which names no URL: a binary the image lacks, or at another version,
stops the boot instead of being downloaded.
"""

from __future__ import annotations

import json
from typing import Any

import machine
from infra.boot import systemd
from infra.boot.cloudinit import CloudConfig
from infra.catalog import versions

UNIT = "supercluster-install.service"
SCRIPT_PATH = "/usr/local/sbin/supercluster-install"
MANIFEST_PATH = "/etc/supercluster/install.json"
BIN = "/usr/local/bin"
CNI_BIN = "/opt/cni/bin"
RUNC_PATH = "/usr/local/sbin/runc"

CONTAINERD_BINARIES = ("containerd", "containerd-shim-runc-v2", "ctr")
CNI_PLUGINS = ("loopback", "portmap")
AZURE_CNI_BINARIES = ("azure-vnet", "azure-vnet-ipam")
# Artifacts the image build downloads with no checksum to compare, each with why (docs/security.md, "What remains"):
# every other artifact carries a pinned sha256 or its release's sha256 file (tests/infra/test_machine_image.py).
# Azure CNI's releases publish no checksum file, and the tarball is not reachable from where this program is
# written; its installer checks only the version the binary reports.
AWAITING_CHECKSUM = ("azure-cni",)


def manifest(kubernetes_version: str) -> dict[str, Any]:
    k8s = f"https://dl.k8s.io/v{kubernetes_version}/bin/linux/amd64"
    containerd = versions.CONTAINERD_VERSION
    azure_cni = versions.AZURE_CNI_VERSION
    artifacts = [
        {
            "name": "containerd",
            "url": f"https://github.com/containerd/containerd/releases/download/v{containerd}/"
            f"containerd-{containerd}-linux-amd64.tar.gz",
            "sha256": versions.CONTAINERD_SHA256,
            "files": {name: f"{BIN}/{name}" for name in CONTAINERD_BINARIES},
            "version_command": [f"{BIN}/containerd", "--version"],
            "version_expect": f" v{containerd} ",
        },
        {
            "name": "runc",
            "url": f"https://github.com/opencontainers/runc/releases/download/{versions.RUNC_VERSION}/runc.amd64",
            "sha256": versions.RUNC_SHA256,
            "path": RUNC_PATH,
            "version_command": [RUNC_PATH, "--version"],
            "version_expect": f"runc version {versions.RUNC_VERSION.lstrip('v')}\n",
        },
        {
            "name": "cni-plugins",
            "url": f"https://github.com/containernetworking/plugins/releases/download/{versions.CNI_PLUGINS_VERSION}/"
            f"cni-plugins-linux-amd64-{versions.CNI_PLUGINS_VERSION}.tgz",
            "sha256": versions.CNI_PLUGINS_SHA256,
            "files": {name: f"{CNI_BIN}/{name}" for name in CNI_PLUGINS},
            "version_command": [f"{CNI_BIN}/portmap", "--version"],
            "version_expect": f"plugin {versions.CNI_PLUGINS_VERSION}\n",
        },  # "CNI portmap plugin v1.6.2"
        {
            "name": "azure-cni",
            "url": f"https://github.com/Azure/azure-container-networking/releases/download/{azure_cni}/"
            f"azure-vnet-cni-linux-amd64-{azure_cni}.tgz",
            "files": {name: f"{CNI_BIN}/{name}" for name in AZURE_CNI_BINARIES},
            "version_command": [f"{CNI_BIN}/azure-vnet", "-v"],
            "version_expect": f"Azure CNI Version {azure_cni}\n",
        },
    ]
    for binary in ("kubelet", "kube-proxy"):
        artifacts.append(
            {
                "name": binary,
                "url": f"{k8s}/{binary}",
                "sha256_url": f"{k8s}/{binary}.sha256",
                "path": f"{BIN}/{binary}",
                "version_command": [f"{BIN}/{binary}", "--version"],
                "version_expect": f"Kubernetes v{kubernetes_version}\n",
            }
        )
    return {"artifacts": artifacts}


BOOT_FIELDS = ("name", "version_command", "version_expect")


def boot_manifest(kubernetes_version: str) -> dict[str, Any]:
    """The checks a booting machine runs on the binaries its image carries: no download source."""
    return {
        "artifacts": [
            {key: artifact[key] for key in BOOT_FIELDS} for artifact in manifest(kubernetes_version)["artifacts"]
        ]
    }


def add_install(cloud: CloudConfig, kubernetes_version: str) -> None:
    cloud.add(SCRIPT_PATH, machine.source("node/install.py"), permissions="0755", compressed=True)
    cloud.add(MANIFEST_PATH, json.dumps(boot_manifest(kubernetes_version), indent=1) + "\n")
    cloud.add(
        f"/etc/systemd/system/{UNIT}",
        systemd.unit(
            "Check this node's pinned binaries (from its machine image)",
            [SCRIPT_PATH, MANIFEST_PATH],
            service={"Type": "oneshot", "RemainAfterExit": "true", "Restart": "no"},
            unit_extra={"Before": "containerd.service kubelet.service kube-proxy.service"},
        ),
    )
