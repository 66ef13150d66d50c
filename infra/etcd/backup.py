"""Where etcd snapshots go, how often, and for how long they are kept.

One storage account for both clusters, a container per cluster. Members reach it through a
private endpoint with a Microsoft Entra token for their managed identity (IMDS): the account
refuses shared keys and public network access, so there is no key to leak.
"""

from __future__ import annotations

from infra.config import naming
from infra.etcd.spec import EVENTS, MAIN

# Storage account name purpose (naming.storage_account keeps the first 6 characters: "etcdbk").
STORAGE_PURPOSE = naming.ETCD_BACKUP_STORAGE_PURPOSE
# Every 30 minutes: the worst case loses 30 minutes of cluster state in a total loss
# (a single member's loss loses nothing: it rejoins from its peers).
SNAPSHOT_INTERVAL_MINUTES = 30
SNAPSHOT_SCHEDULE = f"*:0/{SNAPSHOT_INTERVAL_MINUTES}"
# One member (the designated follower) snapshots each round. Once the newest snapshot is older than
# a round and a half, the designated member has missed one, and every member takes a snapshot
# until one gets through: backups keep flowing whichever member cannot upload.
TAKEOVER_AFTER_SECONDS = SNAPSHOT_INTERVAL_MINUTES * 60 * 3 // 2
# Snapshots live under this prefix, the only one the lifecycle rule ages out ...
SNAPSHOT_PREFIX = "snapshots/"
# ... so this marker, written by the first backup of a formed cluster, stays for the cluster's life:
# a member that finds it (or any snapshot) never bootstraps an empty cluster without the operator.
FORMED_MARKER = "cluster-formed.json"
# Backup freshness metrics carry the cluster label "main" or "events" (infra/etcd/backup_metrics.py).
METRICS_CLUSTER_LABELS = {MAIN: "main", EVENTS: "events"}
# The freshness service lists the container at most once a minute, whatever the scrape rate.
METRICS_LISTING_CACHE_SECONDS = 60
# Snapshots older than this are deleted by the account's lifecycle policy.
RETENTION_DAYS = 7
# Deleted (or overwritten) snapshots and containers stay recoverable for this long; Azure allows 1-365.
SOFT_DELETE_DAYS = 14
# Snapshots kept on the member's local disk for a quick restore without a download.
LOCAL_SNAPSHOTS_KEPT = 2
# Blob service REST version; Microsoft Entra (OAuth) authorization needs 2017-11-09 or later
# (learn.microsoft.com/rest/api/storageservices/authorize-with-azure-active-directory).
BLOB_API_VERSION = "2021-08-06"
# Upload in 64 MiB blocks: an 8-20 GiB snapshot exceeds a single Put Blob (5,000 MiB max) and a
# block list holds up to 50,000 blocks (learn.microsoft.com/rest/api/storageservices/put-block).
BLOCK_BYTES = 64 * 1024 * 1024
# IMDS managed-identity token for Azure Storage (learn.microsoft.com/entra/identity/
# managed-identities-azure-resources/how-to-use-vm-token); the VM's only identity is used.
IMDS_STORAGE_TOKEN_URL = (
    "http://169.254.169.254/metadata/identity/oauth2/token"
    "?api-version=2018-02-01&resource=https%3A%2F%2Fstorage.azure.com%2F"
)
# A restore moves etcd's revision back to the snapshot's; jumping it forward by far more than the
# writes since the snapshot, and marking old revisions compacted, makes every watcher re-list
# instead of silently missing events (etcd op-guide/recovery "Restoring with revision bump").
RESTORE_REVISION_BUMP = 1_000_000_000


def storage_account_name(cluster_name: str) -> str:
    return naming.storage_account(cluster_name, STORAGE_PURPOSE)


def account_url(cluster_name: str) -> str:
    """Resolves to the private endpoint inside the cluster (privatelink.blob.core.windows.net)."""
    return f"https://{storage_account_name(cluster_name)}.blob.core.windows.net"


def lifecycle_prefixes(containers: list[str]) -> list[str]:
    """The lifecycle rule's ``prefixMatch``: snapshots only, never the marker. Azure's prefixes start
    with the container name (learn.microsoft.com/azure/storage/blobs/lifecycle-management-overview,
    "prefixMatch")."""
    return [f"{container}/{SNAPSHOT_PREFIX}" for container in sorted(containers)]
