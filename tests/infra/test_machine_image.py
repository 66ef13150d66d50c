"""The machine images: what the customizer puts in them (from the machines' own pins), how machines name
them, and the version validation."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from infra.assembly import machine_image
from infra.catalog import versions
from infra.cluster.cluster_spec import build_cluster_spec
from infra.config.errors import ConfigError
from infra.control_plane import binaries as control_plane_install
from infra.control_plane.apiserver_machine import apiserver_cloud_config
from infra.etcd import member_machine as etcd_machine
from infra.etcd.spec import EVENTS, MAIN, etcd_cluster_spec
from infra.nat_hosts import nat_host_cloud_config
from infra.node import install as node_install
from infra.node import node_cloud_config
from infra.node import pinned_images as node_images
from infra.node.pool import preload_images
from tests.helpers import parsed, pool_node_spec, raw_config

NODE_SCRIPT = "machine/node/install.py"


def config(stack: str = "prod", **changes):
    return parsed(stack, **changes)


@pytest.mark.parametrize("kind", machine_image.KINDS)
def test_customizer_installs_every_node_binary_from_the_manifest_nodes_check(kind):
    script = machine_image.customizer_script(config(), kind)
    manifest = node_install.manifest("1.33.4")
    written = f"cat > {machine_image.WORK_DIR}/install.json <<'{machine_image.HEREDOC_END}'\n"
    assert f"{written}{json.dumps(manifest, indent=1)}\n{machine_image.HEREDOC_END}\n" in script
    assert f"python3 {machine_image.WORK_DIR}/install.py {machine_image.WORK_DIR}/install.json" in script
    # The boot manifest is the same list of binaries, checks only: a pin has one source.
    boot = node_install.boot_manifest("1.33.4")["artifacts"]
    assert [a["name"] for a in boot] == [a["name"] for a in manifest["artifacts"]]
    assert all(b["version_expect"] == a["version_expect"] for a, b in zip(manifest["artifacts"], boot, strict=True))
    assert not any("url" in a or "sha256" in a for a in boot)


def test_only_the_cpu_image_carries_the_control_plane_and_etcd():
    cpu = machine_image.customizer_script(config(), "cpu")
    gpu = machine_image.customizer_script(config(), "gpu")
    for script in (control_plane_install.install_script("1.33.4"), etcd_machine.install_script()):
        assert script in cpu and script not in gpu


def test_customizer_exports_an_archive_of_every_preloaded_image():
    cfg = config()
    script = machine_image.customizer_script(cfg, "gpu")
    assert preload_images(cfg)[0] == versions.PAUSE_IMAGE
    for reference in preload_images(cfg):
        assert f"images export --platform linux/amd64 {node_images.archive_path(reference)} {reference}" in script


def test_the_images_carry_every_package_any_machine_declares():
    """cloud-init installs nothing: every package a machine's boot scripts use must be in the image."""
    for stack in ("dev", "prod"):
        spec = build_cluster_spec(raw_config(stack), "eastus")
        declared = set(
            nat_host_cloud_config(
                spec.config, spec.addresses, "kv", kubernetes_version=spec.node_kubernetes_version
            ).packages
        )
        for pool in spec.config.node_pools:
            declared |= set(
                node_cloud_config(pool_node_spec(spec, pool)).packages  # packages do not depend on maxPods
            )
        for role in (MAIN, EVENTS):
            cluster = etcd_cluster_spec(spec, role)
            declared |= {
                package
                for member in cluster.members
                for package in etcd_machine.member_cloud_config(cluster, member, "kv").packages
            }
        declared |= set(apiserver_cloud_config(spec, {}).packages)
        assert declared and declared <= set(machine_image.PACKAGES), declared - set(machine_image.PACKAGES)
        assert (
            f"apt-get install -y --no-install-recommends {' '.join(machine_image.PACKAGES)}"
            in machine_image.customizer_script(spec.config, "cpu")
        )


def test_base_images_are_exact_versions():
    for kind, image in machine_image.BASE_IMAGES.items():
        assert image["version"] != "latest" and image["version"].count(".") == 2, kind


def test_replicas_follow_azures_one_per_twenty_concurrent_vms():
    assert machine_image.REPLICAS == 50  # a whole 1,000-VM scale set at once, 20 VMs per replica


def test_the_fingerprint_follows_what_the_image_carries():
    base = machine_image.fingerprint(config(), "cpu")
    assert machine_image.fingerprint(config(kubernetesVersion="1.33.5"), "cpu") != base
    changed = config(images={"preload": ["registry.k8s.io/pause:3.10", "docker.io/library/busybox:1.36"]})
    assert machine_image.fingerprint(changed, "cpu") != base


@pytest.mark.parametrize("value", ["1.0", "1.0.0.0", "v1.0.0", "01.0.0", "1.0.-1", "latest", "2147483648.0.0", 1.0, ""])
def test_a_malformed_machine_image_version_is_refused(value):
    with pytest.raises(ConfigError, match=r"machineImageVersion = .*Compute Gallery image version MAJOR.MINOR.PATCH"):
        parsed("dev", machineImageVersion=value)


@pytest.mark.parametrize("value", ["0.0.1", "1.0.0", "2147483647.0.12"])
def test_a_well_formed_machine_image_version_is_accepted(value):
    assert parsed("dev", machineImageVersion=value).machine_image_version == value


def test_a_bad_version_stops_the_plan_with_one_line(tmp_path, capsys):
    from plan.__main__ import main

    assert main(["--stack", "dev", "--out", str(tmp_path / "plan"), "--config", "machineImageVersion=latest"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def _run_boot_install(tmp_path, artifact):
    manifest = tmp_path / "install.json"
    manifest.write_text(json.dumps({"artifacts": [artifact]}))
    return subprocess.run([sys.executable, NODE_SCRIPT, str(manifest)], capture_output=True, text=True, timeout=30)


def test_a_booting_machine_refuses_a_binary_its_image_lacks_instead_of_downloading_it(tmp_path):
    missing = {
        "name": "kubelet",
        "version_command": [str(tmp_path / "kubelet"), "--version"],
        "version_expect": "Kubernetes v1.33.4\n",
    }
    result = _run_boot_install(tmp_path, missing)
    assert result.returncode != 0 and "machines download nothing" in result.stderr
    present = tmp_path / "kubelet"
    present.write_text("#!/bin/sh\necho 'Kubernetes v1.33.4'\n")
    present.chmod(0o755)
    assert _run_boot_install(tmp_path, missing).returncode == 0


@pytest.mark.parametrize("kind", machine_image.KINDS)
def test_the_customizer_is_valid_bash_and_the_plan_shows_it(kind, tmp_path):
    script = machine_image.customizer_script(config(), kind)
    path = tmp_path / "customize.sh"
    path.write_text(script)
    result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert machine_image.script_of(machine_image.customizer_commands(config(), kind)) == script
    assert machine_image.script_of(["sudo apt-get update"]) is None


def test_a_built_version_is_never_rebuilt_with_other_contents():
    cfg = config("dev")
    machine_image.check_version_not_reused(None, cfg)  # first deploy
    machine_image.check_version_not_reused(machine_image.built(cfg), cfg)  # nothing changed
    newer = config("dev", kubernetesVersion="1.33.5")
    with pytest.raises(ConfigError, match=r"machineImageVersion = '1.0.0': expected a version not built before"):
        machine_image.check_version_not_reused(machine_image.built(cfg), newer)
    machine_image.check_version_not_reused(
        machine_image.built(cfg), config("dev", kubernetesVersion="1.33.5", machineImageVersion="1.0.1")
    )
    # A kind the last deploy did not build (a first GPU pool) is a new image, not a rebuilt one.
    cpu_only = {"version": "1.0.0", "contents": {"cpu": machine_image.fingerprint(cfg, "cpu")}}
    machine_image.check_version_not_reused(cpu_only, cfg)


def test_every_downloaded_artifact_is_checked_against_a_sha256_but_those_awaiting_one():
    artifacts = {a["name"]: a for a in node_install.manifest("1.33.4")["artifacts"]}
    unchecked = sorted(name for name, a in artifacts.items() if not (a.get("sha256") or a.get("sha256_url")))
    assert unchecked == sorted(node_install.AWAITING_CHECKSUM), "a new artifact needs its sha256, or a stated reason"
