"""An apiserver VM's cloud-init: complete, secret-free, accepted by cloud-init, scripts that run."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shlex
import subprocess
import tarfile
from pathlib import Path

import pytest

from infra.boot.secrets import FETCH_SCRIPT_PATH, FETCH_UNIT
from infra.control_plane import apiserver_machine, binaries, csr_approval, machine_identity, paths, pki, token_minting
from infra.control_plane.scheduler import scheduler_image
from infra.facts.endpoints import LOCAL_APISERVER
from tests.e2e import plan_machines
from tests.helpers import load_yaml, require_tool
from tests.infra.control_plane_files import files, machines, spec


def test_prod_has_five_apiservers_spread_over_three_zones():
    prod = machines("prod")
    assert [m.vm_name for m in prod] == [f"prod-apiserver-{i}" for i in range(5)]
    assert [m.zone for m in prod] == ["1", "2", "3", "1", "2"]
    assert [m.ip for m in prod] == list(spec("prod").addresses.apiserver_ips(5))
    # Nothing per machine: each decides its address at boot (machine_identity), so any instance of one model fits.
    assert len({m.cloud_init for m in prod}) == 1
    assert not [ip for ip in spec("prod").addresses.apiserver_ips(5) if ip in prod[0].cloud_init]


def test_no_secret_in_cloud_init():
    for m in machines("prod"):
        assert "PRIVATE KEY" not in m.cloud_init
        assert "BEGIN CERTIFICATE" not in m.cloud_init
        assert "secretbox" not in m.cloud_init  # the encryption config (it holds the key) is fetched


def test_secrets_are_fetched_by_name_before_the_components_start():
    machine_files = files(machines("prod")[0])
    fetch = machine_files[FETCH_SCRIPT_PATH]
    fetched = pki.apiserver_secret_files(pki.certificates())
    for secret in fetched:
        assert f"fetch {secret.secret_name} {secret.path} {secret.mode}" in fetch
    assert {f.mode for f in fetched if f.path.endswith(".key")} == {"0600"}
    fetch_unit = machine_files[f"/etc/systemd/system/{FETCH_UNIT}"]
    before = next(line for line in fetch_unit.splitlines() if line.startswith("Before="))
    assert {machine_identity.UNIT, *paths.COMPONENT_UNITS} <= set(before.removeprefix("Before=").split())


@pytest.mark.parametrize("unit", paths.COMPONENT_UNITS)
def test_components_want_but_do_not_require_their_preparation(unit):
    """A late Key Vault role assignment must not leave a component failed for good."""
    text = files(machines("prod")[0])[f"/etc/systemd/system/{unit}"]
    assert f"Wants=network-online.target {FETCH_UNIT} {paths.INSTALL_UNIT} {machine_identity.UNIT}" in text
    assert "Requires=" not in text
    assert "Restart=always" in text


@pytest.mark.parametrize("unit", [paths.CONTROLLER_MANAGER_UNIT, paths.SCHEDULER_UNIT])
def test_the_controller_manager_and_scheduler_start_once_their_apiserver_is_ready(unit):
    """They talk only to the VM's own apiserver; started with it, they exited at once (its RBAC not yet
    loaded: 'forbidden'), on every boot, replacement and rollout. The wait runs it as systemd does."""
    sh = require_tool("sh")
    parsed = plan_machines.parse_unit(unit, files(machines("prod")[0])[f"/etc/systemd/system/{unit}"])
    (pre,) = parsed.get("Service", "ExecStartPre")
    argv = shlex.split(pre)
    assert argv[:2] == ["/bin/sh", "-c"], argv
    assert f"--cacert {pki.cert_path(pki.CLUSTER_CA)} {LOCAL_APISERVER}/readyz" in argv[2]
    # Until it answers: here nothing listens, so the wait is still waiting when the timeout ends it.
    waiting = subprocess.run(["timeout", "1", sh, "-c", argv[2].replace(LOCAL_APISERVER, "https://127.0.0.1:9")])
    assert waiting.returncode == 124
    # systemd's start timeout (TimeoutStartSec, 90 s by default) bounds it: then Restart= starts it again.
    assert "Restart=always" in files(machines("prod")[0])[f"/etc/systemd/system/{unit}"]


def test_units_are_enabled_after_the_fetch_unit_exists():
    runcmd = load_yaml(machines("prod")[0].cloud_init)["runcmd"]
    assert runcmd[0] == ["systemctl", "daemon-reload"]
    assert runcmd[-1] == [
        "systemctl",
        "enable",
        "--now",
        paths.INSTALL_UNIT,
        machine_identity.UNIT,
        *paths.COMPONENT_UNITS,
        csr_approval.UNIT,
    ]


@pytest.mark.slow  # a real tool in a subprocess, about a second: the slow stage
def test_cloud_config_schema():
    cloud_init = require_tool("cloud-init")
    rendered = machines("prod")[0].cloud_init
    result = subprocess.run(
        [cloud_init, "schema", "--config-file", "/dev/stdin"], input=rendered, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("script", [paths.INSTALL_SCRIPT, FETCH_SCRIPT_PATH])
def test_scripts_parse(script):
    bash = require_tool("bash")
    text = files(machines("prod")[0])[script]
    result = subprocess.run([bash, "-n"], input=text, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_readiness_command_parses_and_waits_for_readyz():
    bash = require_tool("bash")
    command = apiserver_machine.readiness_command()
    assert command.startswith("/bin/bash -c ")
    inner = subprocess.run(
        [bash, "-c", f"printf %s {command.removeprefix('/bin/bash -c ')}"], capture_output=True, text=True, check=True
    ).stdout
    assert subprocess.run([bash, "-n"], input=inner, capture_output=True, text=True).returncode == 0
    assert "https://127.0.0.1:6443/readyz" in inner and f"restart {FETCH_UNIT}" in inner
    # A new serving certificate with the renewed ones, issued after the fetch brought the CA key.
    assert inner.index(f"restart {FETCH_UNIT}") < inner.index(f"restart {machine_identity.UNIT}")


def test_install_script_pins_versions():
    script = binaries.install_script("1.33.4")
    assert "https://dl.k8s.io/release/v1.33.4/bin/linux/amd64/kube-apiserver" in script
    assert "https://dl.k8s.io/release/v1.33.4/bin/linux/amd64/kube-controller-manager" in script
    image, _, digest = scheduler_image("1.33.4")
    assert f"{image}@{digest}" in script


# ---------------------------------------------------------------- the install functions, run for real


def _stub(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text("#!/bin/bash\nset -euo pipefail\n" + body)
    path.chmod(0o755)


@pytest.fixture
def sandbox(tmp_path):
    """A PATH with fake curl (serves files from ./served) and skopeo (writes an OCI ``dir:`` image)."""
    require_tool("bash")
    served, stubs = tmp_path / "served", tmp_path / "bin"
    served.mkdir()
    stubs.mkdir()
    _stub(
        stubs,
        "curl",
        'out=""; url=""\nwhile [ $# -gt 0 ]; do case "$1" in -o) out=$2; shift 2;; '
        "--retry|--retry-delay) shift 2;; -*) shift;; *) url=$1; shift;; esac; done\n"
        f'cp "{served}/$(basename "$url")" "$out"\n',
    )
    _stub(
        stubs, "skopeo", f'dest="${{@: -1}}"; mkdir -p "${{dest#dir:}}"\ncp -r "{served}/image/." "${{dest#dir:}}/"\n'
    )
    return tmp_path, served, stubs


def _run(sandbox, call: str) -> subprocess.CompletedProcess:
    tmp_path, _, stubs = sandbox
    script = "set -euo pipefail\ntmp=$(mktemp -d)\n" + binaries._FUNCTIONS + call + "\n"
    env = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}"}
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path)


def test_release_binary_is_installed_only_when_its_checksum_matches(sandbox):
    tmp_path, served, _ = sandbox
    (served / "kube-apiserver").write_bytes(b"real binary")
    (served / "kube-apiserver.sha256").write_text(hashlib.sha256(b"real binary").hexdigest())
    dest = tmp_path / "kube-apiserver"
    ok = _run(sandbox, f"install_release_binary https://dl.k8s.io/x/kube-apiserver {dest}")
    assert ok.returncode == 0, ok.stderr
    assert dest.read_bytes() == b"real binary" and os.access(dest, os.X_OK)

    (served / "kube-apiserver").write_bytes(b"tampered")
    dest.unlink()
    bad = _run(sandbox, f"install_release_binary https://dl.k8s.io/x/kube-apiserver {dest}")
    assert bad.returncode != 0
    assert not dest.exists() and not Path(f"{dest}.new").exists()


def test_image_binary_is_taken_from_the_layers(sandbox):
    tmp_path, served, _ = sandbox
    image = served / "image"
    image.mkdir()
    layers = []
    for content in ({"etc/os-release": b"base"}, {"bin/kube-scheduler": b"scheduler build"}):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            for name, data in content.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mode = 0o755
                tar.addfile(info, io.BytesIO(data))
        digest = hashlib.sha256(buffer.getvalue()).hexdigest()
        (image / digest).write_bytes(buffer.getvalue())
        layers.append({"digest": f"sha256:{digest}"})
    (image / "manifest.json").write_text(json.dumps({"layers": layers}))
    dest = tmp_path / "kube-scheduler"
    result = _run(sandbox, f"install_image_binary example.test/s@sha256:{'0' * 64} bin/kube-scheduler {dest}")
    assert result.returncode == 0, result.stderr
    assert dest.read_bytes() == b"scheduler build" and os.access(dest, os.X_OK)


def test_the_approver_and_the_minter_run_sandboxed():
    """Both long-running programs of the apiservers that hold a credential run without privilege gain, on a read-only
    file system but for the approver's own state directory, without home directories, with their own /tmp
    (systemd.exec(5)); each key below is checked on each unit, so dropping one from either fails here."""
    rendered = files(machines("prod")[0])
    expected = {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes"}
    for unit_name in (csr_approval.UNIT, token_minting.UNIT):
        unit = plan_machines.parse_unit(unit_name, rendered[f"/etc/systemd/system/{unit_name}"])
        for key, value in expected.items():
            assert unit.get("Service", key) == [value], (unit_name, key)
    approver = plan_machines.parse_unit(csr_approval.UNIT, rendered[f"/etc/systemd/system/{csr_approval.UNIT}"])
    assert approver.get("Service", "StateDirectory") == [csr_approval.STATE_DIRECTORY]
