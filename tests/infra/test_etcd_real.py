"""Real etcd members, started from the rendered files, lose their disks and come back as the runbook says.

Three members run on loopback with real TLS (certificates following infra/etcd/certificates.py), from
the rendered etcd config file and the rendered member tool; snapshots go to a local stand-in
for Blob storage. The two recoveries of the etcd runbooks (docs/runbooks/) are played end to end:
  1. one member's disk is wiped: it rejoins by itself (prepare) and has every key, including one
     written while it was away;
  2. every disk is wiped: each member refuses to start an empty cluster, the operator runs
     ``etcd-member restore`` on each, and the cluster comes back with the snapshot's keys.
"""

from __future__ import annotations

import json
import shutil

import pytest

from infra.etcd.backup import FORMED_MARKER
from tests.etcd_local import KEYS, LocalCluster, get, snapshots
from tests.etcd_specs import clusters
from tests.fake_azure_blob import FakeBlobService
from tests.helpers import require_tool

# The second stage of scripts/test.sh (tens of seconds): real etcd clusters.
pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path):
    for tool in ("etcd", "etcdctl", "openssl"):
        require_tool(tool)
    _, spec, _ = clusters("dev", members=3)
    blobs = FakeBlobService(container=spec.backup_container).start()
    try:
        local = LocalCluster(tmp_path, spec, blobs)
        try:
            yield local
        finally:
            local.stop_all()  # never leave an etcd behind
    finally:
        blobs.stop()


def leader_name(cluster) -> str:
    endpoint = cluster.members[0].client_url
    status = json.loads(cluster.etcdctl([endpoint], "endpoint", "status", "--write-out=json").stdout)
    members = json.loads(cluster.etcdctl([endpoint], "member", "list", "--write-out=json").stdout)["members"]
    return next(m["name"] for m in members if m["ID"] == status[0]["Status"]["leader"])


def test_members_rejoin_after_losing_their_disk_and_restore_after_losing_quorum(cluster):
    members = cluster.members
    # First boot: nobody answers and no snapshot exists, so every member bootstraps the cluster.
    for result in cluster.tool_all("prepare"):
        assert result.returncode == 0, result.stderr
        assert "first bootstrap" in result.stderr
    for member in members:
        member.start()
    cluster.wait_healthy(members)
    for key, value in KEYS.items():
        cluster.etcdctl([members[0].client_url], "put", key, value)

    # The timer fires on every member; exactly one (a follower) takes and uploads the snapshot.
    results = cluster.tool_all("backup")
    assert all(r.returncode == 0 for r in results), [r.stderr for r in results]
    assert sum("uploaded" in r.stderr for r in results) == 1, [r.stderr for r in results]
    (snapshot,) = snapshots(cluster).values()
    # Every member that found no marker raced to write it; exactly one write won, none was overwritten.
    assert FORMED_MARKER in cluster.blobs.blobs
    assert all(r.endswith(f"{FORMED_MARKER}: already exists") for r in cluster.blobs.rejected), cluster.blobs.rejected
    assert len(snapshot.data) > 16384, "the upload should have taken several blocks"
    assert snapshot.metadata["member"] != leader_name(cluster)  # a follower reads the whole database

    # 1. Member 2's local disk is wiped (deallocation); a key is written while it is away.
    lost = members[2]
    lost.stop()
    shutil.rmtree(lost.data_dir)
    cluster.wait_healthy(members[:2])  # a new leader, if the lost member led
    cluster.etcdctl([members[0].client_url], "put", "/registry/test/while-away", "written")
    result = cluster.tool_run(lost, "prepare")
    assert result.returncode == 0, result.stderr
    assert "joining it as a fresh member" in result.stderr and "removing this member's stale entry" in result.stderr
    lost.start()
    cluster.wait_healthy(members)
    for key, value in KEYS.items():
        assert get(cluster, lost, key) == value
    assert get(cluster, lost, "/registry/test/while-away") == "written"

    # 2. Every disk is wiped at once: quorum is lost, and members must not start an empty cluster.
    cluster.stop_all()
    for member in members:
        shutil.rmtree(member.data_dir)
    for result in cluster.tool_all("prepare"):
        assert result.returncode == 2, result.stderr
        assert "etcd-member restore" in result.stderr
    # The runbook: restore the latest snapshot on every member, then start them all.
    # (Test only: with the initial corruption check on, members that all start at once each wait
    # out a 10 s peer timeout before serving; test_etcd_config asserts the rendered setting.)
    cluster.set_config("experimental-initial-corrupt-check", False)
    for result in cluster.tool_all("restore"):
        assert result.returncode == 0, result.stderr
    for result in cluster.tool_all("prepare"):
        assert result.returncode == 0 and "data directory present" in result.stderr, result.stderr
    for member in members:
        member.start()
    cluster.wait_healthy(members)
    for member in members:
        for key, value in KEYS.items():
            assert get(cluster, member, key) == value
        # Written after the snapshot: lost with the disks, exactly as the runbook warns.
        assert get(cluster, member, "/registry/test/while-away") is None
