"""An etcd member's cloud-init: its files, units, boot order, install script, and no secret in it."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import tarfile

import pytest

import machine
from infra.assembly import machine_image
from infra.boot import local_disk
from infra.boot.cloudinit import MAX_CUSTOM_DATA_BASE64_CHARS, custom_data
from infra.boot.secrets import FETCH_SCRIPT_PATH, FETCH_UNIT
from infra.catalog.versions import ETCD_SHA256, ETCD_VERSION
from infra.etcd import backup
from infra.etcd.config_file import CONFIG_PATH, MOUNT_POINT
from infra.etcd.member_machine import (
    BACKUP_TIMER,
    BACKUP_UNIT,
    DISK_UNIT,
    EFFECTIVE_CONFIG_PATH,
    ETCD_UNIT,
    INSTALL_PATH,
    METRICS_UNIT,
    TOOL_PATH,
    TOOL_SETTINGS_PATH,
    install_script,
    member_cloud_config,
    member_cloud_init,
    member_tool_source,
)
from plan.artifacts import file_content
from tests.etcd_specs import clusters
from tests.helpers import load_yaml, require_tool


def cloud_init(stack="prod", member_index=0, **changes):
    _, main, _ = clusters(stack, **changes)
    member = main.members[member_index]
    text = member_cloud_init(main, member, "prod-kv-123456")
    document = load_yaml(text)
    files = {entry["path"]: entry for entry in document["write_files"]}
    return main, member, text, document, files


def unit_lines(files, name):
    return file_content(files[f"/etc/systemd/system/{name}"]).splitlines()


def test_no_secret_in_cloud_init_only_secret_names():
    _, member, text, _, files = cloud_init(member_index=1)
    assert "PRIVATE KEY" not in text and "BEGIN CERTIFICATE" not in text
    fetch = file_content(files[FETCH_SCRIPT_PATH])
    for name in (
        "etcd-ca-crt",
        "prod-etcd-1-server-crt",
        "prod-etcd-1-server-key",
        "prod-etcd-1-peer-crt",
        "prod-etcd-1-peer-key",
    ):
        assert f"fetch {name} " in fetch
    assert "prod-etcd-0-" not in fetch  # never another member's keys


def test_custom_data_fits_azure_even_for_seven_members():
    _, _, text, _, _ = cloud_init(members=7, member_index=6)
    assert len(custom_data(text, "etcd")) < MAX_CUSTOM_DATA_BASE64_CHARS


def test_ships_the_config_file_the_tool_and_its_settings():
    main, member, _, _, files = cloud_init()
    assert load_yaml(file_content(files[CONFIG_PATH]))["name"] == member.name
    assert file_content(files[TOOL_PATH]) == member_tool_source() and files[TOOL_PATH]["permissions"] == "0755"
    settings = json.loads(file_content(files[TOOL_SETTINGS_PATH]))
    assert settings["endpoints"] == main.client_urls
    assert settings["etcd_config"] == CONFIG_PATH and settings["effective_config"] == EFFECTIVE_CONFIG_PATH
    assert settings["backup"]["account_url"] == f"https://{backup.storage_account_name('prod')}.blob.core.windows.net"
    assert settings["backup"]["container"] == "etcd"
    assert "storage.azure.com" in settings["backup"]["imds_token_url"]


def test_local_disk_settings_follow_the_vm_size():
    _, _, _, document, files = cloud_init()  # Standard_L16s_v3: two local NVMe disks
    disk = json.loads(file_content(files[local_disk.SETTINGS_PATH]))
    assert disk["mount"] == MOUNT_POINT and disk["label"] == "etcd" and disk["nvme_disks"] == 2
    assert disk["bind_dirs"] == [] and "mounts" not in document
    assert json.loads(file_content(files[TOOL_SETTINGS_PATH]))["disk"] == {"mount": MOUNT_POINT}  # prepare's check
    assert file_content(files[local_disk.SCRIPT_PATH]) == machine.source(local_disk.PROGRAM)
    main, member, _, _, _ = cloud_init()  # RAID 0 over both: mdadm comes with the machine image
    assert "mdadm" in member_cloud_config(main, member, "kv").packages and "mdadm" in machine_image.PACKAGES
    assert "packages" not in document
    _, _, _, document, files = cloud_init("dev")  # Standard_L8s_v3: one NVMe disk, no RAID
    assert json.loads(file_content(files[local_disk.SETTINGS_PATH]))["nvme_disks"] == 1
    _, _, _, document, files = cloud_init(vmSize="Standard_D16ds_v5")  # temp disk only
    assert json.loads(file_content(files[local_disk.SETTINGS_PATH]))["nvme_disks"] == 0
    assert document["mounts"] == [["ephemeral0"]]  # cloud-init leaves the temp disk to the program


def test_etcd_unit_starts_from_the_prepared_config_after_disk_and_secrets():
    _, _, _, _, files = cloud_init()
    lines = unit_lines(files, ETCD_UNIT)
    assert f"Requires={DISK_UNIT} {FETCH_UNIT}" in lines
    assert f"RequiresMountsFor={MOUNT_POINT}" in lines
    assert f"ExecStartPre=+{TOOL_PATH} prepare" in lines
    assert "ExecStart=/usr/local/bin/etcd \\" in lines and f"  --config-file={EFFECTIVE_CONFIG_PATH}" in lines
    assert "Type=notify" in lines and "User=etcd" in lines and "Restart=always" in lines
    assert "StartLimitIntervalSec=0" in lines
    secrets_unit = unit_lines(files, FETCH_UNIT)
    assert f"Before={ETCD_UNIT}" in secrets_unit


def test_disk_unit_runs_every_boot_before_etcd():
    _, _, _, _, files = cloud_init()
    lines = unit_lines(files, DISK_UNIT)
    # The one local-disk program nodes run too, with this machine's settings.
    assert f"ExecStart={local_disk.SCRIPT_PATH} \\" in lines and f"  {local_disk.SETTINGS_PATH}" in lines
    assert f"Before={ETCD_UNIT}" in lines and "Type=oneshot" in lines
    assert "WantedBy=multi-user.target" in lines


def test_backups_run_on_a_timer():
    _, _, _, _, files = cloud_init()
    timer = unit_lines(files, BACKUP_TIMER)
    assert f"OnCalendar={backup.SNAPSHOT_SCHEDULE}" in timer and "Persistent=true" in timer
    assert "WantedBy=timers.target" in timer
    service = unit_lines(files, BACKUP_UNIT)
    assert "  backup" in service and "Type=oneshot" in service
    assert "[Install]" not in service  # started by its timer only


def test_boot_order():
    _, _, _, document, _ = cloud_init()
    assert document["runcmd"] == [
        ["systemctl", "enable", "--now", FETCH_UNIT],
        [INSTALL_PATH],
        ["systemctl", "daemon-reload"],
        ["systemctl", "enable", DISK_UNIT, ETCD_UNIT, BACKUP_TIMER, METRICS_UNIT],
        ["systemctl", "start", "--no-block", ETCD_UNIT, BACKUP_TIMER, METRICS_UNIT],
    ]


def test_install_script_pins_the_release_and_its_checksum():
    script = install_script()
    assert (
        f"https://github.com/etcd-io/etcd/releases/download/v{ETCD_VERSION}/"
        f"etcd-v{ETCD_VERSION}-linux-amd64.tar.gz" in script
    )
    assert ETCD_SHA256 in script and "sha256sum --check --strict" in script
    assert script.index("sha256sum") < script.index("tar -xzf") < script.index("install -m 0755")


@pytest.fixture
def shims(tmp_path):
    """A PATH where curl serves a local file, the etcd user does not exist yet, and install/useradd only
    record their arguments."""
    if os.path.exists("/usr/local/bin/etcd"):
        pytest.skip("a real /usr/local/bin/etcd would short-circuit the script")
    require_tool("sha256sum")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    (bin_dir / "curl").write_text('#!/bin/bash\nwhile [ "$1" != "-o" ]; do shift; done\ncp "$TARBALL" "$2"\n')
    for name in ("install", "useradd"):
        (bin_dir / name).write_text(f'#!/bin/bash\necho "{name} $*" >> {calls}\n')
    (bin_dir / "id").write_text("#!/bin/bash\nexit 1\n")
    for path in bin_dir.iterdir():
        path.chmod(0o755)
    return bin_dir, calls


def fake_release(tmp_path, version: str) -> tuple[str, str]:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name in ("etcd", "etcdctl", "etcdutl", "README.md"):
            info = tarfile.TarInfo(f"etcd-v{version}-linux-amd64/{name}")
            info.size = 4
            tar.addfile(info, io.BytesIO(b"bin\n"))
    path = tmp_path / "release.tar.gz"
    path.write_bytes(buffer.getvalue())
    return str(path), hashlib.sha256(buffer.getvalue()).hexdigest()


def run_install(tmp_path, shims, script: str, tarball: str):
    bin_dir, _ = shims
    path = tmp_path / "etcd-install"
    path.write_text(script)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", TARBALL=tarball)
    return subprocess.run(["bash", str(path)], capture_output=True, text=True, env=env)


def test_install_refuses_a_download_that_does_not_match_the_pinned_checksum(tmp_path, shims):
    tarball, _ = fake_release(tmp_path, ETCD_VERSION)
    result = run_install(tmp_path, shims, install_script(), tarball)
    assert result.returncode != 0 and "FAILED" in result.stdout + result.stderr
    assert not shims[1].exists(), "nothing may be installed from an unverified download"


def test_install_unpacks_a_verified_release_and_creates_the_etcd_user(tmp_path, shims):
    tarball, digest = fake_release(tmp_path, ETCD_VERSION)
    result = run_install(tmp_path, shims, install_script(ETCD_VERSION, digest), tarball)
    assert result.returncode == 0, result.stderr
    calls = shims[1].read_text().splitlines()
    assert calls[0].startswith("install -m 0755 ") and calls[0].endswith(" /usr/local/bin/")
    assert [os.path.basename(p) for p in calls[0].split()[3:6]] == ["etcd", "etcdctl", "etcdutl"]
    assert calls[1].startswith("useradd --system") and calls[1].endswith(" etcd")


def test_rendering_is_deterministic():
    assert cloud_init()[2] == cloud_init()[2]
    assert base64.b64decode(custom_data(cloud_init()[2], "x")).decode().startswith("#cloud-config\n")


def test_systemd_accepts_every_rendered_unit(tmp_path):
    """systemd-analyze verify: unknown keys, bad values and broken dependencies are reported; the only
    complaint allowed is that the binaries (installed at boot) are not on this machine."""
    require_tool("systemd-analyze")
    _, _, _, _, files = cloud_init()
    units = []
    for path, entry in files.items():
        if path.startswith("/etc/systemd/system/"):
            unit = tmp_path / os.path.basename(path)
            unit.write_text(file_content(entry))
            units.append(str(unit))
    assert len(units) == 6
    result = subprocess.run(["systemd-analyze", "verify", "--man=no", *units], capture_output=True, text=True)
    complaints = [
        line
        for line in result.stderr.splitlines()
        if line.strip() and not line.endswith("is not executable: No such file or directory")
    ]
    assert complaints == []
