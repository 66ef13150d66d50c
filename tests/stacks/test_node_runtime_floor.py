"""No machine in either plan installs, or boots with, a container runtime older than the releases that
fixed the 2025 container-escape advisories (``versions.RUNC_FLOOR`` and ``CONTAINERD_FLOOR`` name them).

Read from what the plans hand Azure: each image build's customizer script (the binaries it downloads,
by checksum) and each machine's cloud-init (the version its boot check demands)."""

from __future__ import annotations

import base64
import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest

import machine
from infra.assembly import machine_image
from infra.catalog import versions
from infra.node import gpu, install
from plan.artifacts import cloud_init_files

TEMPLATE = "azure-native:virtualmachineimages:VirtualMachineImageTemplate"
FLOORS = {"runc": versions.RUNC_FLOOR, "containerd": versions.CONTAINERD_FLOOR}
VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")
SCRIPTS = Path(machine.__file__).parent / "node"


@pytest.fixture(params=["dev", "prod"])
def run(request):
    return request.getfixturevalue(f"{request.param}_plan")


def runtime_versions(manifest: dict) -> dict[str, tuple[int, ...]]:
    """``{artifact: (major, minor, patch)}`` for runc and containerd, from the version each check expects."""
    found = {}
    for artifact in manifest["artifacts"]:
        if artifact["name"] in FLOORS:
            match = VERSION.search(artifact["version_expect"])
            assert match, artifact
            found[artifact["name"]] = tuple(map(int, match.groups()))
    assert set(found) == set(FLOORS), manifest
    return found


def assert_at_floor(found: dict[str, tuple[int, ...]], where: str) -> None:
    for name, floor in FLOORS.items():
        assert found[name] >= floor, f"{where}: {name} {found[name]} is older than {floor}"


def test_every_image_build_installs_a_runtime_with_the_2025_escape_fixes(run):
    templates = run.of_type(TEMPLATE)
    assert templates
    for template in templates:
        [step] = template.inputs["customize"]
        script = base64.b64decode(step["inline"][0].split()[1]).decode()
        written = f"/install.json <<'{machine_image.HEREDOC_END}'\n"
        manifest = json.loads(script.split(written, 1)[1].split(f"\n{machine_image.HEREDOC_END}\n", 1)[0])
        assert_at_floor(runtime_versions(manifest), template.name)
        runc = next(a for a in manifest["artifacts"] if a["name"] == "runc")
        assert f"/{versions.RUNC_VERSION}/runc.amd64" in runc["url"] and runc["sha256"] == versions.RUNC_SHA256


def test_every_machine_refuses_to_boot_an_older_runtime(run):
    checked = 0
    for registration in run.registrations:
        boot = cloud_init_files(registration).get(install.MANIFEST_PATH)
        if boot is None:
            continue
        assert_at_floor(runtime_versions(json.loads(boot)), registration.name)
        checked += 1
    assert checked >= 3  # the node pools and the NAT hosts at least


def test_the_floor_itself_is_the_fixed_releases():
    # Lowering a floor to let an older pin through fails here: the advisories' first fixed releases.
    assert versions.RUNC_FLOOR >= (1, 2, 8) and versions.CONTAINERD_FLOOR >= (1, 7, 29)


# ------------------------------------------------------------------ the NVIDIA Container Toolkit on GPU nodes


def _gpu_check(run) -> tuple[str, dict[str, str]]:
    """The GPU check script and its unit's environment, from a GPU pool's cloud-init."""
    for registration in run.registrations:
        files = cloud_init_files(registration)
        if gpu.SCRIPT_PATH in files:
            unit = files[f"/etc/systemd/system/{gpu.UNIT}"]
            (line,) = [x for x in unit.splitlines() if x.startswith("Environment=")]
            return files[gpu.SCRIPT_PATH], dict(pair.split("=", 1) for pair in shlex.split(line.split("=", 1)[1]))
    raise AssertionError("no GPU pool in the plan")


def _boot_check(tmp_path: Path, run, runtime_version: str | None) -> subprocess.CompletedProcess:
    """The rendered check run for real, with its rendered environment, against stand-ins: ``nvidia-smi`` seeing
    every GPU and a container runtime reporting ``runtime_version`` (None: no version line)."""
    script, environment = _gpu_check(run)
    (tmp_path / "check").write_text(script)
    gpus = int(environment["GPUS"])
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\n" + "".join(f"echo GPU-{i}\n" for i in range(gpus)))
    line = f"NVIDIA Container Runtime version {runtime_version}" if runtime_version else "usage: ..."
    (tmp_path / "runtime").write_text(f"#!/bin/sh\necho '{line}'\necho 'commit: 0000'\n")
    for name in ("check", "nvidia-smi", "runtime"):
        (tmp_path / name).chmod(0o755)
    env = {**environment, "PATH": f"{tmp_path}:/usr/bin:/bin", "NVIDIA_RUNTIME": str(tmp_path / "runtime")}
    return subprocess.run(["bash", str(tmp_path / "check")], env=env, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize(
    ("version", "boots"), [("1.17.7", False), ("1.16.2", False), (None, False), ("1.17.8", True), ("1.18.2", True)]
)
def test_a_gpu_node_refuses_to_register_with_a_toolkit_older_than_the_escape_fixes(tmp_path, prod_plan, version, boots):
    """The toolkit is the default runtime on GPU nodes and its hooks run as root on the host: releases up to
    1.17.7 let a container image run code there (CVE-2025-23266). The image's base, not the program, installs it,
    so every GPU node checks its version before kubelet starts (the check is required by kubelet's unit)."""
    done = _boot_check(tmp_path, prod_plan, version)
    assert (done.returncode == 0) is boots, done.stderr
    if not boots:
        assert "older than 1.17.8" in done.stderr, done.stderr


def test_the_toolkit_floor_is_the_fixed_release():
    assert versions.NVIDIA_CONTAINER_TOOLKIT_FLOOR >= (1, 17, 8)


def test_every_gpu_image_build_installs_the_pinned_toolkit_over_the_base(run):
    """The HPC base image's own toolkit is not known to have the fixes: the build installs the pinned one."""
    written = f"/nvidia-toolkit.sh <<'{machine_image.HEREDOC_END}'\n"
    builds = 0
    for template in run.of_type(TEMPLATE):
        [step] = template.inputs["customize"]
        script = base64.b64decode(step["inline"][0].split()[1]).decode()
        if "-gpu-" not in template.name:
            assert written not in script, template.name
            continue
        shipped = script.split(written, 1)[1].split(f"\n{machine_image.HEREDOC_END}\n", 1)[0]
        assert shipped + "\n" == (SCRIPTS / "nvidia_toolkit.sh").read_text()
        (line,) = [x for x in script.splitlines() if x.startswith("TOOLKIT_VERSION=")]
        environment = dict(pair.split("=", 1) for pair in shlex.split(line)[:-1])
        assert environment == gpu.toolkit_install_environment()
        version = tuple(map(int, VERSION.match(environment["TOOLKIT_VERSION"]).groups()))
        assert version >= versions.NVIDIA_CONTAINER_TOOLKIT_FLOOR
        builds += 1
    assert builds == 1


STUBS = {
    "curl": '#!/bin/sh\nwhile [ "$1" != -o ]; do shift; done; echo KEY > "$2"\n',
    "gpg": '#!/bin/sh\ncase "$*" in *--show-keys*) echo "fpr:::::::::$STUB_FINGERPRINT:";;\n'
    '*--dearmor*) while [ "$1" != --output ]; do shift; done; echo KEYRING > "$2";; esac\n',
    "apt-get": '#!/bin/sh\necho "apt-get $*" >> "$STUB_LOG"\n',
    "apt-mark": '#!/bin/sh\necho "apt-mark $*" >> "$STUB_LOG"\n',
}


def _install_toolkit(tmp_path: Path, served_fingerprint: str) -> tuple[subprocess.CompletedProcess, Path]:
    """The image build's toolkit install run for real against stand-ins for curl, gpg and apt (the key served
    having ``served_fingerprint``), with apt's places under ``tmp_path``; the base image's list for NVIDIA's
    repository is already there, beside another one."""
    bin_dir, sources = tmp_path / "bin", tmp_path / "sources.list.d"
    bin_dir.mkdir()
    sources.mkdir()
    for name, text in STUBS.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (sources / "base-nvidia.list").write_text("deb https://nvidia.github.io/libnvidia-container/stable/deb/amd64 /\n")
    (sources / "other.list").write_text("deb http://archive.ubuntu.com/ubuntu jammy main\n")
    env = {
        **gpu.toolkit_install_environment(),
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "KEYRING": str(tmp_path / "keyring.gpg"),
        "SOURCES": str(sources),
        "STUB_FINGERPRINT": served_fingerprint,
        "STUB_LOG": str(tmp_path / "apt.log"),
    }
    script = SCRIPTS / "nvidia_toolkit.sh"
    return subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30), tmp_path


def test_the_toolkit_install_takes_the_pinned_packages_from_the_pinned_key(tmp_path):
    done, root = _install_toolkit(tmp_path, versions.NVIDIA_TOOLKIT_KEY_FINGERPRINT)
    assert done.returncode == 0, done.stderr
    pinned = versions.NVIDIA_CONTAINER_TOOLKIT_VERSION
    log = (root / "apt.log").read_text()
    for package in ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools"):
        assert f" {package}={pinned}" in log, log
    assert "apt-mark hold nvidia-container-toolkit" in log
    lists = {p.name: p.read_text() for p in (root / "sources.list.d").iterdir()}
    assert set(lists) == {"other.list", "nvidia-container-toolkit.list"}
    keyring = root / "keyring.gpg"
    assert (
        lists["nvidia-container-toolkit.list"] == f"deb [signed-by={keyring}] {versions.NVIDIA_TOOLKIT_REPOSITORY} /\n"
    )


def test_the_toolkit_install_refuses_a_key_it_does_not_pin(tmp_path):
    done, root = _install_toolkit(tmp_path, "0" * 40)
    assert done.returncode == 1 and "nothing installed" in done.stderr, done.stderr
    assert not (root / "apt.log").exists() and not (root / "keyring.gpg").exists()
