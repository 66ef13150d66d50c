"""Everything an etcd member VM receives through cloud-init, and in which order it runs.

Every boot: ``etcd-disk`` mounts the local SSD (formatting it when Azure handed over a wiped
disk), ``supercluster-secrets`` fetches this member's certificates and keys from Key Vault,
then ``etcd`` starts after ``etcd-member prepare`` decided how (normal start, first bootstrap,
or rejoin). ``etcd-backup.timer`` snapshots the cluster to Blob storage. First boot only:
``etcd-install`` checks that the machine image carries the pinned etcd release (``install_script``
put it there when the image was built, after checking its SHA-256; infra/assembly/machine_image.py).

customData carries no secret: key material is named here and fetched at boot.
"""

from __future__ import annotations

import functools
import json
import shlex
from typing import Any

import machine
from infra.boot import local_disk, systemd
from infra.boot.cloudinit import CloudConfig, render
from infra.boot.secrets import FETCH_UNIT, add_secret_fetching
from infra.catalog.versions import ETCD_SHA256, ETCD_VERSION
from infra.config import naming
from infra.etcd import backup, backup_metrics
from infra.etcd.certificates import member_secret_files
from infra.etcd.config_file import BACKUP_DIR, CONFIG_PATH, MOUNT_POINT, etcd_config, render_config
from infra.etcd.spec import EtcdClusterSpec, EtcdMember
from machine.etcd import member

TOOL_PATH = "/usr/local/sbin/etcd-member"
# The tool finds its settings here without being told (an operator runs `etcd-member restore` by hand).
TOOL_SETTINGS_PATH = member.SETTINGS_PATH
INSTALL_PATH = "/usr/local/sbin/etcd-install"
EFFECTIVE_CONFIG_PATH = "/run/etcd/etcd.yaml"
BIN_DIR = "/usr/local/bin"
ETCD_USER = "etcd"

DISK_UNIT = "etcd-disk.service"
ETCD_UNIT = "etcd.service"
BACKUP_UNIT = "etcd-backup.service"
BACKUP_TIMER = "etcd-backup.timer"
METRICS_UNIT = "etcd-backup-metrics.service"
# The operator creates this file (on every member) to let an empty cluster start although the backup
# container shows the cluster existed (docs/runbooks/etcd-quorum-lost.md); the first backup afterwards removes it.
NEW_CLUSTER_OVERRIDE_PATH = "/etc/etcd/start-empty-cluster"

# The label of the file system on the member's local disks (infra/boot/local_disk.py).
DISK_LABEL = "etcd"


@functools.cache
def member_tool_source() -> str:
    return machine.source("etcd/member.py")


def etcd_release_url(version: str = ETCD_VERSION) -> str:
    return f"https://github.com/etcd-io/etcd/releases/download/v{version}/etcd-v{version}-linux-amd64.tar.gz"


def tool_settings(cluster: EtcdClusterSpec) -> dict[str, Any]:
    """``/etc/etcd/member.json``: what the member tool needs besides etcd's own config file."""
    return {
        "etcd_config": CONFIG_PATH,
        "effective_config": EFFECTIVE_CONFIG_PATH,
        "etcd_user": ETCD_USER,
        "etcdctl": f"{BIN_DIR}/etcdctl",
        "etcdutl": f"{BIN_DIR}/etcdutl",
        "endpoints": cluster.client_urls,
        "new_cluster_override": NEW_CLUSTER_OVERRIDE_PATH,
        # prepare refuses to start etcd unless this is a mount point (never the OS disk).
        "disk": {"mount": MOUNT_POINT},
        "backup": {
            "account_url": backup.account_url(cluster.cluster_name),
            "container": cluster.backup_container,
            "api_version": backup.BLOB_API_VERSION,
            "imds_token_url": backup.IMDS_STORAGE_TOKEN_URL,
            "block_bytes": backup.BLOCK_BYTES,
            "local_dir": BACKUP_DIR,
            "keep_local": backup.LOCAL_SNAPSHOTS_KEPT,
            "restore_revision_bump": backup.RESTORE_REVISION_BUMP,
            "snapshot_prefix": backup.SNAPSHOT_PREFIX,
            "formed_marker": backup.FORMED_MARKER,
            "takeover_after_seconds": backup.TAKEOVER_AFTER_SECONDS,
            "attempt_file": f"{BACKUP_DIR}/last-attempt.json",
        },
        "metrics": {
            "port": backup_metrics.METRICS_PORT,
            "last_success": backup_metrics.LAST_SUCCESS_METRIC,
            "last_attempt": backup_metrics.LAST_ATTEMPT_METRIC,
            "cluster": backup.METRICS_CLUSTER_LABELS[cluster.role],
            "cache_seconds": backup.METRICS_LISTING_CACHE_SECONDS,
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
        f'if [ "$({BIN_DIR}/etcd --version 2>/dev/null | head -n 1)" = {q("etcd Version: " + version)} ]; then',
        "  exit 0",
        "fi",
        "tmp=$(mktemp -d)",
        "trap 'rm -rf \"$tmp\"' EXIT",
        f'curl -fsSL --retry 10 --retry-delay 3 --retry-all-errors -o "$tmp/etcd.tar.gz" {q(url)}',
        f'echo {q(sha256 + "  ")}"$tmp/etcd.tar.gz" | sha256sum --check --strict -',
        'tar -xzf "$tmp/etcd.tar.gz" -C "$tmp" --strip-components=1',
        f'install -m 0755 "$tmp/etcd" "$tmp/etcdctl" "$tmp/etcdutl" {BIN_DIR}/',
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
        '{ echo "etcd-install: $binary is not in this machine image (docs/node-image.md)" >&2; exit 1; }; done',
        f'if [ "$({BIN_DIR}/etcd --version 2>/dev/null | head -n 1)" != {q("etcd Version: " + version)} ]; then',
        f"  echo {q(f'etcd-install: this machine image does not carry etcd v{version} (docs/node-image.md)')} >&2",
        "  exit 1",
        "fi",
        f"id -u {ETCD_USER} >/dev/null 2>&1 || useradd --system --no-create-home --home-dir {MOUNT_POINT} "
        f"--shell /usr/sbin/nologin {ETCD_USER}",
    ]
    return "\n".join(lines) + "\n"


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
        service={
            "Type": "oneshot",
            "Restart": "no",
            "Nice": "10",
            "IOSchedulingClass": "best-effort",
            "IOSchedulingPriority": "7",
        },
        wanted_by=None,
    )


def metrics_unit() -> str:
    """Backup freshness for Prometheus on every member (so the alert never depends on which member
    uploads). NSG: only the monitoring source needs METRICS_PORT (infra/etcd/backup_metrics.py);
    the monitoring engineer adds the scrape job, the alert and the rule."""
    return systemd.unit(
        "Serve etcd backup freshness (newest snapshot in Blob storage, this member's last attempt)",
        [TOOL_PATH, "metrics"],
        after=["network-online.target", DISK_UNIT],
        wants=["network-online.target"],
        service={
            "Restart": "always",
            "RestartSec": "10",
            "NoNewPrivileges": "true",
            "ProtectSystem": "strict",
            "ProtectHome": "true",
            "PrivateTmp": "true",
        },
    )


def backup_timer() -> str:
    return systemd.timer(
        f"Snapshot etcd every {backup.SNAPSHOT_INTERVAL_MINUTES} minutes",
        backup.SNAPSHOT_SCHEDULE,
        timer_settings={"Persistent": "true", "AccuracySec": "1min"},
    )


def member_cloud_config(cluster: EtcdClusterSpec, member: EtcdMember, vault_name: str) -> CloudConfig:
    cloud = CloudConfig()
    if cluster.vm_size.nvme_disks > 1:
        cloud.packages.append("mdadm")
    cloud.add(CONFIG_PATH, render_config(etcd_config(cluster, member)))
    cloud.add(TOOL_SETTINGS_PATH, json.dumps(tool_settings(cluster), indent=2, sort_keys=True) + "\n")
    cloud.add(TOOL_PATH, member_tool_source(), permissions="0755", compressed=True)
    cloud.add(INSTALL_PATH, boot_check_script(), permissions="0755")
    local_disk.add_local_disk(
        cloud,
        local_disk.LocalDisks.of(cluster.vm_size),
        unit=DISK_UNIT,
        mount=MOUNT_POINT,
        label=DISK_LABEL,
        before=[ETCD_UNIT],
        description="Mount etcd's local SSD (formatted again whenever Azure hands over a wiped disk)",
    )
    # CIS 1.1.7: the etcd "pod specification file" is root's only.
    cloud.add(f"/etc/systemd/system/{ETCD_UNIT}", etcd_unit(cluster), permissions="0600")
    cloud.add(f"/etc/systemd/system/{BACKUP_UNIT}", backup_unit())
    cloud.add(f"/etc/systemd/system/{BACKUP_TIMER}", backup_timer())
    cloud.add(f"/etc/systemd/system/{METRICS_UNIT}", metrics_unit())
    add_secret_fetching(
        cloud,
        vault_name,
        member_secret_files(cluster, member),
        before=[ETCD_UNIT],
        identity=naming.role_identity_below_subscription(cluster.cluster_name, cluster.role),
    )
    cloud.runcmd += [
        [INSTALL_PATH],
        ["systemctl", "daemon-reload"],
        ["systemctl", "enable", DISK_UNIT, ETCD_UNIT, BACKUP_TIMER, METRICS_UNIT],
        # etcd reports ready only once a quorum exists; cloud-init must not wait for the other members.
        ["systemctl", "start", "--no-block", ETCD_UNIT, BACKUP_TIMER, METRICS_UNIT],
    ]
    return cloud


def member_cloud_init(cluster: EtcdClusterSpec, member: EtcdMember, vault_name: str) -> str:
    return render(member_cloud_config(cluster, member, vault_name))
