"""Rendered node files fed to the real tools: cloud-init, containerd, nft, bash, and the installer itself."""

from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import machine
from infra.boot.cloudinit import render
from infra.node import cni, containerd, node_cloud_config
from tests.helpers import require_tool
from tests.infra.test_node_bootstrap import spec

SCRIPTS = machine.PROGRAMS_DIR / "node"


@pytest.mark.slow  # a real tool in a subprocess, about a second: the slow stage
def test_every_rendered_node_cloud_init_passes_the_schema(dev_plan, prod_plan, tmp_path):
    from plan.artifacts import custom_data_of

    tool = require_tool("cloud-init")
    rendered = {}
    for run in (dev_plan, prod_plan):
        pools = set()
        for vmss in run.node_scale_sets():
            # The first shard of each pool: the others differ only in the InfiniBand domain label.
            pool = vmss.name.rsplit("-s", 1)[0]
            if pool not in pools:
                pools.add(pool)
                rendered[custom_data_of(vmss)] = vmss.name
    assert len(rendered) == 7  # dev: gpu, cpu, platform; prod: h100a, h100b, cpu, platform
    for text, name in rendered.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(text)
        result = subprocess.run([tool, "schema", "--config-file", str(path)], capture_output=True, text=True)
        assert result.returncode == 0, f"{name}: {result.stdout}{result.stderr}"


@pytest.mark.slow  # a real tool in a subprocess, about a second: the slow stage
def test_temp_disk_node_cloud_init_passes_the_schema(tmp_path):
    from infra.node.state_disk import LocalDisks

    tool = require_tool("cloud-init")
    path = tmp_path / "cpu.yaml"
    path.write_text(render(node_cloud_config(spec(local_disks=LocalDisks(0), gpus=0))))
    result = subprocess.run([tool, "schema", "--config-file", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def containerd_version(tool: str) -> tuple[int, int]:
    out = subprocess.run([tool, "--version"], capture_output=True, text=True, check=True).stdout
    major, minor = re.search(r" v?(\d+)\.(\d+)\.", out).groups()
    return int(major), int(minor)


@pytest.mark.parametrize("gpus", [0, 8], ids=["cpu", "gpu"])
def test_containerd_loads_the_rendered_config(gpus, tmp_path):
    """Written for the containerd nodes install (1.7). Debian 12's is 1.6: it loads the same
    `version = 2` schema and we check everything it knows; `image_pull_progress_timeout` arrived
    in 1.7.0, so it is checked in the dump only where the local binary knows it."""
    tool = require_tool("containerd")
    path = tmp_path / "config.toml"
    path.write_text(containerd.render_config("registry.k8s.io/pause:3.10", gpu=gpus > 0))
    result = subprocess.run([tool, "--config", str(path), "config", "dump"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    dump = result.stdout
    assert 'root = "/var/lib/local-ssd/containerd"' in dump
    assert "max_concurrent_downloads = 10" in dump
    assert 'sandbox_image = "registry.k8s.io/pause:3.10"' in dump
    assert "SystemdCgroup = true" in dump
    assert f'default_runtime_name = "{"nvidia" if gpus else "runc"}"' in dump
    if containerd_version(tool) >= (1, 7):
        assert 'image_pull_progress_timeout = "30m0s"' in dump


def test_pod_network_rules_load_in_nft(tmp_path):
    tool = require_tool("nft")
    path = tmp_path / "rules.nft"
    path.write_text(cni.render_rules("10.0.0.0/8"))
    result = subprocess.run([tool, "-c", "-f", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    rules = path.read_text()
    # Azure/azure-container-networking/docs/cni.md: masquerade pod egress except to local addresses and the
    # VNet address space.
    assert "fib daddr type local return" in rules and "ip daddr 10.0.0.0/8 return" in rules
    assert "masquerade" in rules and "ip daddr 169.254.169.254 drop" in rules
    # AKS's block of WireServer's protected settings: TCP 80 and the HostGAPlugin's 32526, DNS left open.
    assert f"ip daddr {cni.WIRESERVER_IP} tcp dport {{ 80, 32526 }} drop" in rules


def test_conflist_hands_secondary_ips_to_pods():
    document = json.loads(cni.render_conflist("169.254.20.10"))
    vnet = document["plugins"][0]
    assert vnet["type"] == "azure-vnet" and vnet["ipam"] == {"type": "azure-vnet-ipam"}
    assert vnet["ipsToRouteViaHost"] == ["169.254.20.10"]  # NodeLocal DNSCache
    assert json.loads(cni.render_conflist(None))["plugins"][0]["ipsToRouteViaHost"] == []


@pytest.mark.parametrize("script", ["gpu_check.sh"])
def test_shell_scripts_parse(script):
    bash = require_tool("bash")
    result = subprocess.run([bash, "-n", str(SCRIPTS.joinpath(script))], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


# ------------------------------------------------------------------ the installer, run for real


def fake_binary(version_line: str) -> bytes:
    return f"#!/bin/sh\necho '{version_line}'\n".encode()


def run_installer(tmp_path: Path, artifacts: list[dict]) -> subprocess.CompletedProcess:
    manifest = tmp_path / "install.json"
    manifest.write_text(json.dumps({"artifacts": artifacts}))
    return subprocess.run(
        [sys.executable, str(SCRIPTS.joinpath("install.py")), str(manifest)], capture_output=True, text=True
    )


def test_installer_verifies_checksum_and_version(tmp_path):
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        for name in ("containerd", "ctr"):
            data = fake_binary("containerd github.com/containerd/containerd v1.7.28 abc")
            info = tarfile.TarInfo(f"bin/{name}")
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    tarball = tmp_path / "containerd.tar.gz"
    tarball.write_bytes(archive.getvalue())
    target = tmp_path / "bin"
    artifact = {
        "name": "containerd",
        "url": tarball.as_uri(),
        "sha256": hashlib.sha256(archive.getvalue()).hexdigest(),
        "files": {"containerd": str(target / "containerd"), "ctr": str(target / "ctr")},
        "version_command": [str(target / "containerd"), "--version"],
        "version_expect": " v1.7.28 ",
    }

    wrong = run_installer(tmp_path, [{**artifact, "sha256": "0" * 64}])
    assert wrong.returncode != 0 and "sha256 mismatch" in wrong.stderr
    assert not (target / "containerd").exists()

    stale = run_installer(tmp_path, [{**artifact, "version_expect": " v1.7.99 "}])
    assert stale.returncode != 0 and "does not report" in stale.stderr

    ok = run_installer(tmp_path, [artifact])
    assert ok.returncode == 0, ok.stderr
    assert (target / "ctr").exists()
    again = run_installer(tmp_path, [{**artifact, "url": (tmp_path / "gone.tgz").as_uri()}])
    assert again.returncode == 0, "an installed, matching version is not downloaded again"


def test_installer_checks_a_published_sha256_file(tmp_path):
    binary = fake_binary("Kubernetes v1.33.4")
    (tmp_path / "kubelet").write_bytes(binary)
    (tmp_path / "kubelet.sha256").write_text(hashlib.sha256(binary).hexdigest())
    artifact = {
        "name": "kubelet",
        "url": (tmp_path / "kubelet").as_uri(),
        "sha256_url": (tmp_path / "kubelet.sha256").as_uri(),
        "path": str(tmp_path / "out/kubelet"),
        "version_command": [str(tmp_path / "out/kubelet"), "--version"],
        "version_expect": "Kubernetes v1.33.4\n",
    }
    assert run_installer(tmp_path, [artifact]).returncode == 0
