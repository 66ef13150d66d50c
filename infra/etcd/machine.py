"""Everything an etcd member VM receives through cloud-init, and in which order it runs.

Every boot: ``etcd-disk`` mounts the local SSD (formatting it when Azure handed over a wiped
disk), ``supercluster-secrets`` fetches this member's certificates and keys from Key Vault,
then ``etcd`` starts after ``etcd-member prepare`` decided how (normal start, first bootstrap,
or rejoin). ``etcd-backup.timer`` snapshots the cluster to Blob storage. First boot only:
``etcd-install`` checks that the machine image carries the pinned etcd release (``install_script``
put it there when the image was built, after checking its SHA-256; infra/machine_image.py).

customData carries no secret: key material is named here and fetched at boot.
"""

from __future__ import annotations

import functools
import json
import shlex
from pathlib import Path
from typing import Any

from infra import naming, systemd
from infra.cloudinit import CloudConfig, render
from infra.etcd import backup
from infra.etcd.config_file import BACKUP_DIR, CONFIG_PATH, MOUNT_POINT, etcd_config, render_config
from infra.etcd.pki import member_secret_files
from infra.etcd.spec import EtcdClusterSpec, EtcdMember
from infra.secrets import FETCH_UNIT, add_secret_fetching
from infra.versions import ETCD_SHA256, ETCD_VERSION

TOOL_PATH = "/usr/local/sbin/etcd-member"
TOOL_SETTINGS_PATH = "/etc/etcd/member.json"
INSTALL_PATH = "/usr/local/sbin/etcd-install"
EFFECTIVE_CONFIG_PATH = "/run/etcd/etcd.yaml"
BIN_DIR = "/usr/local/bin"
ETCD_USER = "etcd"

DISK_UNIT = "etcd-disk.service"
ETCD_UNIT = "etcd.service"
BACKUP_UNIT = "etcd-backup.service"
BACKUP_TIMER = "etcd-backup.timer"

# Azure's local NVMe disks identify as "Microsoft NVMe Direct Disk" (and "... v2" on newer sizes);
# remote disks on NVMe sizes are "MSFT NVMe Accelerator v1.0" (Azure/azure-vm-utils,
# udev/80-azure-disk.rules), so a prefix match never picks the OS or a data disk.
NVME_MODEL_PREFIX = "Microsoft NVMe Direct Disk"
# Ubuntu's cloud-init formats and mounts the temp (resource) disk here on every fresh allocation.
RESOURCE_DISK_MOUNT = "/mnt"


@functools.cache
def member_tool_source() -> str:
    return (Path(__file__).with_name("member_tool.py")).read_text()


def etcd_release_url(version: str = ETCD_VERSION) -> str:
    return (f"https://github.com/etcd-io/etcd/releases/download/v{version}/"
            f"etcd-v{version}-linux-amd64.tar.gz")


def disk_settings(cluster: EtcdClusterSpec) -> dict[str, Any]:
    size = cluster.vm_size
    if size.nvme_disks:
        return {"mount": MOUNT_POINT, "kind": "nvme", "nvme_count": size.nvme_disks,
                "nvme_model_prefix": NVME_MODEL_PREFIX}
    return {"mount": MOUNT_POINT, "kind": "resource", "resource_mount": RESOURCE_DISK_MOUNT}


def tool_settings(cluster: EtcdClusterSpec) -> dict[str, Any]:
    """``/etc/etcd/member.json``: what the member tool needs besides etcd's own config file."""
    return {
        "etcd_config": CONFIG_PATH,
        "effective_config": EFFECTIVE_CONFIG_PATH,
        "etcd_user": ETCD_USER,
        "etcdctl": f"{BIN_DIR}/etcdctl",
        "etcdutl": f"{BIN_DIR}/etcdutl",
        "endpoints": cluster.client_urls,
        "disk": disk_settings(cluster),
        "backup": {
            "account_url": backup.account_url(cluster.cluster_name),
            "container": cluster.backup_container,
            "api_version": backup.BLOB_API_VERSION,
            "imds_token_url": backup.IMDS_STORAGE_TOKEN_URL,
            "block_bytes": backup.BLOCK_BYTES,
            "local_dir": BACKUP_DIR,
            "keep_local": backup.LOCAL_SNAPSHOTS_KEPT,
            "restore_revision_bump": backup.RESTORE_REVISION_BUMP,
        },
    }


def install_script(version: str = ETCD_VERSION, sha256: str = ETCD_SHA256) -> str:
    """Installs the pinned upstream release only if its SHA-256 matches; then the ``etcd`` user."""
    url = etcd_release_url(version)
    q = shlex.quote
    lines = [
        "#!/bin/bash",
        f"# Written by supercluster: installs etcd v{version} from the upstream release, checked against its",
        "# pinned SHA-256 (infra/versions.py) before anything is unpacked.",
        "set -euo pipefail",
        f"if [ \"$({BIN_DIR}/etcd --version 2>/dev/null | head -n 1)\" = {q('etcd Version: ' + version)} ]; then",
        "  exit 0",
        "fi",
        "tmp=$(mktemp -d)",
        "trap 'rm -rf \"$tmp\"' EXIT",
        f"curl -fsSL --retry 10 --retry-delay 3 --retry-all-errors -o \"$tmp/etcd.tar.gz\" {q(url)}",
        f"echo {q(sha256 + '  ')}\"$tmp/etcd.tar.gz\" | sha256sum --check --strict -",
        "tar -xzf \"$tmp/etcd.tar.gz\" -C \"$tmp\" --strip-components=1",
        f"install -m 0755 \"$tmp/etcd\" \"$tmp/etcdctl\" \"$tmp/etcdutl\" {BIN_DIR}/",
        f"id -u {ETCD_USER} >/dev/null 2>&1 || useradd --system --no-create-home --home-dir {MOUNT_POINT} "
        f"--shell /usr/sbin/nologin {ETCD_USER}",
    ]
    return "\n".join(lines) + "\n"


def boot_check_script(version: str = ETCD_VERSION) -> str:
    """At boot: the machine image's etcd is the pinned release (nothing is downloaded); then the user."""
    q = shlex.quote
    lines = [
        "#!/bin/bash",
        f"# Written by supercluster: checks the machine image carries etcd v{version} (infra/etcd/machine.py).",
        "set -euo pipefail",
        f"for binary in etcd etcdctl etcdutl; do [ -x {BIN_DIR}/$binary ] || "
        "{ echo \"etcd-install: $binary is not in this machine image (docs/node-image.md)\" >&2; exit 1; }; done",
        f"if [ \"$({BIN_DIR}/etcd --version 2>/dev/null | head -n 1)\" != {q('etcd Version: ' + version)} ]; then",
        f"  echo {q(f'etcd-install: this machine image does not carry etcd v{version} (docs/node-image.md)')} >&2",
        "  exit 1",
        "fi",
        f"id -u {ETCD_USER} >/dev/null 2>&1 || useradd --system --no-create-home --home-dir {MOUNT_POINT} "
        f"--shell /usr/sbin/nologin {ETCD_USER}",
    ]
    return "\n".join(lines) + "\n"


def disk_unit() -> str:
    return systemd.unit(
        "Mount etcd's local SSD (formatted again whenever Azure hands over a wiped disk)",
        [TOOL_PATH, "disk"],
        # The temp disk is mounted on /mnt by cloud-init; NVMe disks need only udev.
        after=["local-fs.target", "cloud-init.service"],
        service={"Type": "oneshot", "RemainAfterExit": "true", "Restart": "on-failure", "RestartSec": "10"},
        unit_extra={"Before": ETCD_UNIT},
    )


def etcd_unit(cluster: EtcdClusterSpec) -> str:
    return systemd.unit(
        f"etcd member of the {cluster.role} cluster",
        [f"{BIN_DIR}/etcd", f"--config-file={EFFECTIVE_CONFIG_PATH}"],
        after=["network-online.target", DISK_UNIT, FETCH_UNIT],
        requires=[DISK_UNIT, FETCH_UNIT],
        wants=["network-online.target"],
        service={
            "Type": "notify",
            "User": ETCD_USER,
            # Runs as root ('+'): owns the data dir and keys to etcd, decides new/existing/rejoin.
            "ExecStartPre": f"+{TOOL_PATH} prepare",
            "RuntimeDirectory": "etcd",
            "Restart": "always",
            "RestartSec": "15",
            # Joining a large cluster streams a multi-GiB snapshot before etcd reports ready.
            "TimeoutStartSec": "infinity",
            "LimitNOFILE": "65536",
        },
        # Never stop retrying: a member waiting for quorum must come back by itself.
        unit_extra={"RequiresMountsFor": MOUNT_POINT, "StartLimitIntervalSec": "0"},
    )


def backup_unit() -> str:
    return systemd.unit(
        "Snapshot etcd and upload it to Blob storage (one designated member per round)",
        [TOOL_PATH, "backup"],
        after=[ETCD_UNIT],
        service={"Type": "oneshot", "Restart": "no", "Nice": "10",
                 "IOSchedulingClass": "best-effort", "IOSchedulingPriority": "7"},
        wanted_by=None,
    )


def backup_timer() -> str:
    return systemd.timer("Snapshot etcd every 30 minutes", backup.SNAPSHOT_SCHEDULE,
                         timer_settings={"Persistent": "true", "AccuracySec": "1min"})


def member_cloud_config(cluster: EtcdClusterSpec, member: EtcdMember, vault_name: str) -> CloudConfig:
    cloud = CloudConfig()
    if cluster.vm_size.nvme_disks > 1:
        cloud.packages.append("mdadm")
    cloud.add(CONFIG_PATH, render_config(etcd_config(cluster, member)))
    cloud.add(TOOL_SETTINGS_PATH, json.dumps(tool_settings(cluster), indent=2, sort_keys=True) + "\n")
    cloud.add(TOOL_PATH, member_tool_source(), permissions="0755")
    cloud.add(INSTALL_PATH, boot_check_script(), permissions="0755")
    cloud.add(f"/etc/systemd/system/{DISK_UNIT}", disk_unit())
    cloud.add(f"/etc/systemd/system/{ETCD_UNIT}", etcd_unit(cluster))
    cloud.add(f"/etc/systemd/system/{BACKUP_UNIT}", backup_unit())
    cloud.add(f"/etc/systemd/system/{BACKUP_TIMER}", backup_timer())
    add_secret_fetching(cloud, vault_name, member_secret_files(member), before=[ETCD_UNIT],
                        identity_name=naming.role_identity(cluster.cluster_name, cluster.role))
    cloud.runcmd += [
        [INSTALL_PATH],
        ["systemctl", "daemon-reload"],
        ["systemctl", "enable", DISK_UNIT, ETCD_UNIT, BACKUP_TIMER],
        # etcd reports ready only once a quorum exists; cloud-init must not wait for the other members.
        ["systemctl", "start", "--no-block", ETCD_UNIT, BACKUP_TIMER],
    ]
    return cloud


def member_cloud_init(cluster: EtcdClusterSpec, member: EtcdMember, vault_name: str) -> str:
    return render(member_cloud_config(cluster, member, vault_name))
