"""Real etcd through the day-2 changes: growing the cluster, a failed restore, backups that must not stop.

Members run on loopback from their rendered files (``tests/etcd_local.py``); snapshots go to a
local stand-in for Blob storage. Each scenario was broken before the member tool learnt it:
  1. growing 3 -> 4 -> 5, one member per deploy, then replaying the restore runbook used each
     member's rendered ``initial-cluster`` (stale on the first three) and split the cluster;
  2. a restore that failed on a corrupt snapshot left ``member/snap/db`` in the data directory;
  3. when the designated member could not upload, nobody did, and once the snapshots had aged
     out, wiping every member started a new, empty cluster.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest

from infra.etcd import backup_metrics
from infra.etcd.backup import FORMED_MARKER
from tests.etcd_local import KEYS, LocalCluster, get, snapshots
from tests.etcd_specs import clusters
from tests.fake_azure_blob import FakeBlobService
from tests.helpers import require_tool

# The second stage of scripts/test.sh (tens of seconds): real etcd clusters grown, restored and wiped.
pytestmark = pytest.mark.slow


@pytest.fixture
def make_cluster(tmp_path):
    for tool in ("etcd", "etcdctl", "openssl"):
        require_tool(tool)
    made: list[tuple[LocalCluster, FakeBlobService]] = []

    def make(spec) -> LocalCluster:
        blobs = FakeBlobService(container=spec.backup_container).start()
        made.append((None, blobs))
        local = LocalCluster(tmp_path, spec, blobs)
        made[-1] = (local, blobs)
        return local

    yield make
    for local, blobs in made:
        if local is not None:
            local.stop_all()  # never leave an etcd behind
        blobs.stop()


def cluster_ids(cluster, members) -> set[int]:
    ids = set()
    for member in members:
        status = json.loads(cluster.etcdctl([member.client_url], "endpoint", "status", "--write-out=json").stdout)
        ids.add(status[0]["Status"]["header"]["cluster_id"])
    return ids


def wait_names_published(cluster, members, timeout: float = 20) -> None:
    """A started member publishes its name through raft a moment after it answers health checks, and a
    snapshot records the membership by name (a member with none yet gets a stand-in name, so a restore
    treats it as joined later). The CI run of 2026-11-26 19:13, on a loaded machine, backed up before
    the fifth member's name was out; this waits for every name first."""
    deadline = time.monotonic() + timeout
    while True:
        listing = cluster.etcdctl([members[0].client_url], "member", "list", "--write-out=json").stdout
        names = sorted(m.get("name", "") for m in json.loads(listing)["members"])
        if names == sorted(m.name for m in members):
            return
        assert time.monotonic() < deadline, f"member names not all published after {timeout:.0f} s: {names}"
        time.sleep(0.2)


def bootstrap(cluster, members) -> None:
    for result in cluster.tool_all("prepare", members=members):
        assert result.returncode == 0 and "first bootstrap" in result.stderr, result.stderr
    for member in members:
        member.start()
    cluster.wait_healthy(members)
    for key, value in KEYS.items():
        cluster.etcdctl([members[0].client_url], "put", key, value)


def wipe_all(cluster, members) -> None:
    cluster.stop_all()
    for member in members:
        shutil.rmtree(member.data_dir, ignore_errors=True)


def test_growing_three_to_five_one_member_per_deploy_then_restoring_keeps_one_cluster(make_cluster):
    # Three deploys: etcd.members 3, then 4, then 5 (one member per deploy, infra/etcd/membership_change.py).
    (_, three, _), (_, four, _), (_, five, _) = (clusters("dev", members=count) for count in (3, 4, 5))
    assert five.members[:3] == three.members and five.members[:4] == four.members  # a member keeps its address
    cluster = make_cluster(five)
    members = cluster.members
    # Each member has the files of the deploy that created it: Azure never changes an existing VM's
    # customData, so the first three keep a three-member initial-cluster for good.
    for member in members[:3]:
        cluster.install(member, three)
    cluster.install(members[3], four)
    bootstrap(cluster, members[:3])

    for grown in (members[3], members[4]):
        result = cluster.tool_run(grown, "prepare")
        assert result.returncode == 0 and "joining it as a fresh member" in result.stderr, result.stderr
        assert f"adding {grown.name}" in result.stderr
        effective = (grown.root / "run" / "etcd.yaml").read_text()
        assert "initial-cluster-state: existing" in effective
        grown.start()
        cluster.wait_healthy(members[: members.index(grown) + 1])
    assert len(cluster_ids(cluster, members)) == 1
    wait_names_published(cluster, members)

    results = cluster.tool_all("backup")
    assert sum("uploaded" in r.stderr for r in results) == 1, [r.stderr for r in results]
    (snapshot,) = snapshots(cluster).values()
    assert snapshot.metadata["initialcluster"].count("=") == 5  # the membership it was taken with

    # The restore runbook, replayed on every member of the grown cluster.
    wipe_all(cluster, members)
    cluster.set_config("experimental-initial-corrupt-check", False)  # test only: see test_etcd_real.py
    for result in cluster.tool_all("restore"):
        assert result.returncode == 0 and "(5 members)" in result.stderr, result.stderr
    for result in cluster.tool_all("prepare"):
        assert result.returncode == 0 and "data directory present" in result.stderr, result.stderr
    for member in members:
        member.start()
    cluster.wait_healthy(members)
    assert len(cluster_ids(cluster, members)) == 1
    for member in members:
        assert all(get(cluster, member, key) == value for key, value in KEYS.items())


def test_a_restore_that_fails_on_a_corrupt_snapshot_leaves_nothing_etcd_would_start_from(make_cluster):
    _, spec, _ = clusters("dev", members=1)
    cluster = make_cluster(spec)
    (member,) = cluster.members
    bootstrap(cluster, [member])
    result = cluster.tool_run(member, "backup")
    assert result.returncode == 0 and "uploaded" in result.stderr, result.stderr
    (local_snapshot,) = (member.root / "disk" / "backups").glob("*.db")
    wipe_all(cluster, [member])

    # Bit rot in the snapshot: its trailing SHA-256 no longer matches, which etcd checks only after
    # it has copied the database into the data directory.
    corrupt = local_snapshot.with_name("corrupt.db")
    data = bytearray(local_snapshot.read_bytes())
    data[-1] ^= 0xFF
    corrupt.write_bytes(bytes(data))
    shutil.copy(f"{local_snapshot}.json", f"{corrupt}.json")
    result = cluster.tool_run(member, "restore", f"--snapshot={corrupt}")
    assert result.returncode == 1 and "snapshot restore failed" in result.stderr, result.stderr
    assert not (member.data_dir / "member").exists()
    assert not list(member.data_dir.parent.glob("*.restoring"))
    # So the next start does not serve the corrupt data: there is nothing to start from, and the
    # backup container says the cluster existed.
    result = cluster.tool_run(member, "prepare")
    assert result.returncode == 2 and "etcd-member restore" in result.stderr, result.stderr

    result = cluster.tool_run(member, "restore")  # the intact snapshot from Blob storage
    assert result.returncode == 0, result.stderr
    cluster.set_config("experimental-initial-corrupt-check", False)
    assert cluster.tool_run(member, "prepare").returncode == 0
    member.start()
    cluster.wait_healthy([member])
    assert all(get(cluster, member, key) == value for key, value in KEYS.items())


def scrape(url: str, timeout: float = 10) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=2) as response:
                return response.read().decode()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def sample(text: str, metric: str) -> float | None:
    match = re.search(rf'^{metric}{{cluster="main"}} (\S+)$', text, re.MULTILINE)
    return float(match.group(1)) if match else None


def test_backups_keep_flowing_and_an_empty_start_needs_the_operator(make_cluster):
    _, spec, _ = clusters("dev", members=3)
    cluster = make_cluster(spec)
    members = cluster.members
    bootstrap(cluster, members)
    results = cluster.tool_all("backup")
    (first,) = snapshots(cluster).values()
    designated = first.metadata["member"]
    assert FORMED_MARKER in cluster.blobs.blobs

    # The designated member loses its upload rights; its snapshot is now older than a round and a half.
    cluster.blobs.refuse_uploads_from.add(designated)
    first.last_modified -= 2 * 3600
    results = dict(zip((m.name for m in members), cluster.tool_all("backup"), strict=True))
    assert results[designated].returncode == 1, results[designated].stderr
    takers = {blob.metadata["member"] for blob in snapshots(cluster).values()} - {designated}
    assert takers and designated not in takers, [r.stderr for r in results.values()]
    assert all("overdue" in results[name].stderr for name in takers)

    # Every member publishes the cluster's freshness, whoever uploaded.
    watcher = members[0]
    settings = json.loads((watcher.root / "member.json").read_text())
    server = subprocess.Popen(
        [sys.executable, str(cluster.tool), f"--settings={watcher.root / 'member.json'}", "metrics"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        text = scrape(f"http://127.0.0.1:{settings['metrics']['port']}/metrics")
    finally:
        server.kill()
        server.wait(timeout=10)
    newest = max(blob.last_modified for blob in snapshots(cluster).values())
    assert sample(text, backup_metrics.LAST_SUCCESS_METRIC) == pytest.approx(newest, abs=1)
    assert time.time() - sample(text, backup_metrics.LAST_ATTEMPT_METRIC) < 120

    # Backups stop for good and age out; then every member loses its disk at once.
    wipe_all(cluster, members)
    for name in list(snapshots(cluster)):
        del cluster.blobs.blobs[name]
    for result in cluster.tool_all("prepare"):
        assert result.returncode == 2, result.stderr
        refusal = [line for line in result.stderr.splitlines() if "refusing" in line]
        assert len(refusal) == 1 and FORMED_MARKER in refusal[0] and "start-empty-cluster" in refusal[0]
        assert "etcd-member restore" in refusal[0]
    assert not any((m.data_dir / "member").exists() for m in members)

    # The operator decides to start empty: the override file on every member.
    for member in members:
        member.override.write_text("")
    for result in cluster.tool_all("prepare"):
        assert result.returncode == 0 and "EMPTY cluster" in result.stderr, result.stderr
    for member in members:
        member.start()
    cluster.wait_healthy(members)
    # The first backup of the new cluster takes the override away again.
    cluster.blobs.refuse_uploads_from.clear()
    assert all(r.returncode == 0 for r in cluster.tool_all("backup"))
    assert not any(m.override.exists() for m in members)
