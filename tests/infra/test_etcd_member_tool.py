"""The member tool's decisions (start, rejoin, backup turn, disks) and its Blob storage client."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from infra.etcd import backup, backup_metrics
from infra.etcd.config_file import etcd_config
from infra.etcd.member_machine import tool_settings
from machine.etcd import member as tool
from tests.etcd_local import free_ports
from tests.etcd_specs import clusters
from tests.fake_azure_blob import FakeBlobService, StoredBlob
from tests.helpers import load_yaml

ME = "https://10.0.0.5:2380"


def member(id_, name, peer, started=True):
    return {
        "ID": id_,
        "name": name,
        "peerURLs": [peer],
        "clientURLs": [peer.replace("2380", "2379")] if started else [],
    }


# --------------------------------------------------------------------------- rejoin


def test_a_member_that_lost_its_data_is_removed_and_added_again():
    members = [member(1, "a", "https://10.0.0.4:2380"), member(2, "b", ME), member(3, "c", "https://10.0.0.6:2380")]
    assert tool.rejoin_steps(ME, members) == (2, True)


def test_a_new_member_is_added():
    assert tool.rejoin_steps(ME, [member(1, "a", "https://10.0.0.4:2380")]) == (None, True)


def test_an_entry_that_never_started_is_joined_as_it_is():
    members = [member(1, "a", "https://10.0.0.4:2380"), {"ID": 9, "peerURLs": [ME]}]
    assert tool.rejoin_steps(ME, members) == (None, False)


def test_initial_cluster_for_a_join_names_every_current_member():
    _, main, _ = clusters(members=3)
    conf = etcd_config(main, main.members[1])
    members = [
        member(1, "prod-etcd-0", main.members[0].peer_url),
        {"ID": 7, "peerURLs": [main.members[1].peer_url]},  # this member, just added: no name yet
        {"ID": 8, "name": "", "peerURLs": [main.members[2].peer_url]},
    ]
    assert tool.initial_cluster(members, conf) == main.initial_cluster


# --------------------------------------------------------------------------- backup turn


def status(member_id, leader):
    return {"Endpoint": "x", "Status": {"header": {"member_id": member_id}, "leader": leader}}


def test_the_first_healthy_follower_by_name_takes_the_snapshot():
    members = [
        member(1, "prod-etcd-0", "https://a:2380"),
        member(2, "prod-etcd-1", "https://b:2380"),
        member(3, "prod-etcd-2", "https://c:2380"),
    ]
    assert tool.designated_member(members, [status(1, 1), status(2, 1), status(3, 1)]) == "prod-etcd-1"
    assert tool.designated_member(members, [status(1, 2), status(2, 2), status(3, 2)]) == "prod-etcd-0"
    # prod-etcd-0 is down: the next follower.
    assert tool.designated_member(members, [status(2, 3), status(3, 3)]) == "prod-etcd-1"


def test_a_single_member_backs_itself_up():
    assert tool.designated_member([member(1, "dev-etcd-0", "https://a:2380")], [status(1, 1)]) == "dev-etcd-0"
    assert tool.designated_member([member(1, "dev-etcd-0", "https://a:2380")], []) is None


# --------------------------------------------------------------------------- restore


def test_restore_with_etcdutl_bumps_the_revision_and_marks_it_compacted():
    _, main, _ = clusters()
    settings = tool_settings(main)
    conf = etcd_config(main, main.members[0])
    argv = tool.restore_argv(settings, conf, "/s.db", "/scratch", "m=https://a:2380")
    assert argv[:4] == ["/usr/local/bin/etcdutl", "snapshot", "restore", "/s.db"]
    # The snapshot's membership, not the (possibly stale) rendered initial-cluster; into the scratch dir.
    assert "--initial-cluster=m=https://a:2380" in argv and "--data-dir=/scratch" in argv
    assert "--initial-cluster-token=prod-etcd" in argv and "--name=prod-etcd-0" in argv
    assert "--bump-revision=1000000000" in argv and "--mark-compacted" in argv
    settings["etcdutl"] = None  # etcd 3.4: etcdctl restores, without those flags
    assert tool.restore_argv(settings, conf, "/s.db", "/scratch", "m=u")[0] == "/usr/local/bin/etcdctl"
    assert "--mark-compacted" not in tool.restore_argv(settings, conf, "/s.db", "/scratch", "m=u")


def test_latest_snapshot_is_the_newest_timestamp():
    assert (
        tool.latest(["20260101T000000Z-a.db", "20260102T000000Z-b.db", "20251231T235959Z-c.db"])
        == "20260102T000000Z-b.db"
    )
    with pytest.raises(tool.Refusal):
        tool.latest([])


# --------------------------------------------------------------------------- prepare


@pytest.fixture
def blobs():
    service = FakeBlobService(container="etcd").start()
    yield service
    service.stop()


def local_settings(tmp_path, blobs, mount="/"):
    """One member of a 3-member cluster whose peers are not running (their ports are closed)."""
    _, main, _ = clusters(members=3)
    conf = etcd_config(main, main.members[0])
    conf["data-dir"] = str(tmp_path / "data")
    for tls in ("client-transport-security", "peer-transport-security"):
        for key in ("cert-file", "key-file"):
            path = tmp_path / key
            path.write_text("x")
            conf[tls][key] = str(path)
    (tmp_path / "etcd.yaml").write_text(yaml.safe_dump(conf))
    settings = tool_settings(main)
    closed = free_ports(3)
    settings.update(
        etcd_config=str(tmp_path / "etcd.yaml"),
        effective_config=str(tmp_path / "run" / "etcd.yaml"),
        etcd_user=None,
        endpoints=[f"https://127.0.0.1:{port}" for port in closed],
    )
    settings["disk"]["mount"] = mount
    settings["backup"].update(account_url=blobs.url, imds_token_url=blobs.imds_token_url)
    return settings


def test_first_bootstrap_when_nobody_answers_and_no_snapshot_exists(tmp_path, blobs):
    settings = local_settings(tmp_path, blobs)
    assert "first bootstrap" in tool.prepare(settings)
    effective = load_yaml(Path(settings["effective_config"]).read_text())
    assert effective["initial-cluster-state"] == "new"
    assert blobs.token_requests == 1


def test_an_empty_member_never_starts_a_new_cluster_once_snapshots_exist(tmp_path, blobs):
    blobs.blobs["snapshots/20260101T000000Z-prod-etcd-1.db"] = StoredBlob(b"db", {})
    with pytest.raises(tool.Refusal, match="etcd-member restore"):
        tool.prepare(local_settings(tmp_path, blobs))


def test_a_member_with_data_starts_as_it_is(tmp_path, blobs):
    settings = local_settings(tmp_path, blobs)
    (tmp_path / "data" / "member").mkdir(parents=True)
    assert "data directory present" in tool.prepare(settings)
    assert blobs.token_requests == 0


def test_prepare_hands_the_data_dir_keys_and_their_directory_to_the_etcd_user(tmp_path, blobs, monkeypatch):
    settings = local_settings(tmp_path, blobs)
    settings["etcd_user"] = "etcd"
    monkeypatch.setattr(tool.pwd, "getpwnam", lambda name: type("Entry", (), {"pw_uid": 990, "pw_gid": 991}))
    owned = []
    monkeypatch.setattr(tool.os, "chown", lambda path, uid, gid: owned.append((path, uid, gid)))
    tool.prepare(settings)
    assert {
        (str(tmp_path / "data"), 990, 991),
        (str(tmp_path), 990, 991),
        (str(tmp_path / "key-file"), 990, 991),
    } <= set(owned)


def test_etcd_never_writes_to_an_unmounted_disk(tmp_path, blobs):
    with pytest.raises(tool.Refusal, match="not mounted"):
        tool.prepare(local_settings(tmp_path, blobs, mount=str(tmp_path)))


# --------------------------------------------------------------------------- Blob storage


def blob_client(blobs, block_bytes=1000):
    return tool.Blobs(
        {
            "account_url": blobs.url,
            "container": "etcd",
            "api_version": "2021-08-06",
            "imds_token_url": blobs.imds_token_url,
            "block_bytes": block_bytes,
        }
    )


def test_upload_in_checked_blocks_then_download_verifies(tmp_path, blobs):
    source = tmp_path / "snap.db"
    source.write_bytes(bytes(range(256)) * 20)  # 5,120 bytes: 6 blocks of 1,000
    client = blob_client(blobs)
    client.upload(str(source), "20260101T000000Z-m.db", {"member": "m", "revision": "42"})
    stored = blobs.blobs["20260101T000000Z-m.db"]
    assert stored.data == source.read_bytes() and not blobs.rejected
    assert stored.metadata == {
        "sha256": hashlib.sha256(source.read_bytes()).hexdigest(),
        "member": "m",
        "revision": "42",
    }
    client.download("20260101T000000Z-m.db", str(tmp_path / "back.db"))
    assert (tmp_path / "back.db").read_bytes() == source.read_bytes()
    assert blobs.token_requests == 1  # one token for every call


def test_a_snapshot_is_never_overwritten(tmp_path, blobs):
    source = tmp_path / "snap.db"
    source.write_bytes(b"a")
    client = blob_client(blobs)
    client.upload(str(source), "s.db", {})
    with pytest.raises(RuntimeError, match="409"):
        client.upload(str(source), "s.db", {})


def test_a_corrupted_download_is_refused(tmp_path, blobs):
    blobs.blobs["s.db"] = StoredBlob(b"tampered", {"sha256": hashlib.sha256(b"original").hexdigest()})
    with pytest.raises(RuntimeError, match="does not match"):
        blob_client(blobs).download("s.db", str(tmp_path / "s.db"))
    assert not (tmp_path / "s.db").exists()


def test_listing_follows_pages(blobs):
    blobs.page_size = 3
    for i in range(7):
        blobs.blobs[f"2026010{i}T000000Z-m.db"] = StoredBlob(b"", {})
    client = blob_client(blobs)
    assert client.list() == sorted(blobs.blobs)
    assert len(client.list(max_results=1)) == 1


def test_settings_file_is_plain_json():
    _, main, _ = clusters()
    assert json.loads(json.dumps(tool_settings(main))) == tool_settings(main)


# --------------------------------------------------------------------------- backups that cannot stop


def test_every_member_takes_over_once_the_newest_snapshot_missed_a_round():
    after = backup.TAKEOVER_AFTER_SECONDS
    assert after > backup.SNAPSHOT_INTERVAL_MINUTES * 60  # never in a round the designated member made
    assert not tool.overdue(newest=1000.0, formed=0.0, now=1000.0 + after, takeover_after=after)
    assert tool.overdue(newest=1000.0, formed=0.0, now=1001.0 + after, takeover_after=after)
    # Before the first snapshot the cluster's forming is the reference; before that, nothing is late.
    assert tool.overdue(newest=None, formed=1000.0, now=1001.0 + after, takeover_after=after)
    assert not tool.overdue(newest=None, formed=None, now=1e12, takeover_after=after)


def test_the_cluster_existed_if_the_marker_or_any_snapshot_is_there():
    settings = tool_settings(clusters()[1])["backup"]
    assert tool.cluster_existed(settings, []) is None
    assert "cluster-formed" in tool.cluster_existed(settings, [backup.FORMED_MARKER])
    assert "snapshots exist" in tool.cluster_existed(settings, [f"{backup.SNAPSHOT_PREFIX}20260101T000000Z-m.db"])


def test_freshness_metrics_follow_the_shared_contract():
    _, main, events = clusters()
    metrics = tool_settings(main)["metrics"]
    assert metrics["port"] == backup_metrics.METRICS_PORT
    assert tool_settings(events)["metrics"]["cluster"] == "events"
    text = tool.metrics_text(metrics, newest=1700000000.5, attempt=None)
    assert f'{backup_metrics.LAST_SUCCESS_METRIC}{{cluster="main"}} 1700000000.500' in text.splitlines()
    # No attempt yet: the series is absent (an absent() alert fires), never a made-up value.
    assert f"{backup_metrics.LAST_ATTEMPT_METRIC}{{" not in text
    assert f"# TYPE {backup_metrics.LAST_ATTEMPT_METRIC} gauge" in text


def test_listing_reports_last_modified(blobs):
    blobs.blobs["snapshots/a.db"] = StoredBlob(b"", {}, last_modified=1700000000.0)
    blobs.blobs["cluster-formed.json"] = StoredBlob(b"", {}, last_modified=1600000000.0)
    client = blob_client(blobs)
    assert client.modified_times() == {"cluster-formed.json": 1600000000.0, "snapshots/a.db": 1700000000.0}
    assert client.list(prefix="snapshots/") == ["snapshots/a.db"]
