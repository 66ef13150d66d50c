#!/usr/bin/python3
"""etcd-member: keeps one supercluster etcd member's membership and backups in order (its disk: local_disk.py).

  etcd-member prepare   before every etcd start: decide how this member starts
  etcd-member backup    on the timer: snapshot (one designated member, or any member once the newest
                        snapshot is overdue), verify, upload to Blob storage
  etcd-member metrics   a service: backup freshness for Prometheus (plain HTTP, /metrics)
  etcd-member restore   runbook only: rebuild this member's data directory from a snapshot, atomically

How a member starts (``prepare``), read from etcd's own config file and the data directory:
  - data present                    -> start as is
  - data empty, the cluster is up   -> rejoin: remove this member's stale entry, add it again, start
                                       with initial-cluster-state=existing (also how a new member joins)
  - data empty, the cluster has not  -> first bootstrap (initial-cluster-state=new), unless the backup
    formed (nobody answers, or no      container shows the cluster existed (the marker its first backup
    member has ever started)           wrote, or any snapshot): then it lost quorum, and this refuses to
                                       start an empty one unless the operator created the override file
                                       (docs/runbooks/etcd.md)

Settings: /etc/etcd/member.json (written by supercluster; see infra/etcd/machine.py). Needs only
Python 3 and PyYAML, both on every Ubuntu cloud image (cloud-init depends on them).
"""

from __future__ import annotations

import argparse
import base64
import datetime
import email.utils
import glob
import hashlib
import http.server
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ElementTree

import yaml

SETTINGS_PATH = "/etc/etcd/member.json"
# Blob metadata (and the local ``.json`` next to a snapshot) naming the members the snapshot was
# taken with: every member restores with the same membership, so they agree on one cluster ID.
MEMBERSHIP_METADATA = "initialcluster"


class Refusal(Exception):
    """A situation a human must decide; the message says what to do."""


def log(message: str) -> None:
    print(f"etcd-member: {message}", file=sys.stderr, flush=True)


def load_settings(path: str) -> dict:
    with open(path) as handle:
        return json.load(handle)


def load_etcd_config(settings: dict) -> dict:
    with open(settings["etcd_config"]) as handle:
        return yaml.safe_load(handle)


# --------------------------------------------------------------------------- etcdctl

def tls_flags(conf: dict) -> list[str]:
    """This member's server certificate doubles as its client certificate (it has client auth)."""
    tls = conf["client-transport-security"]
    return [f"--cacert={tls['trusted-ca-file']}", f"--cert={tls['cert-file']}", f"--key={tls['key-file']}"]


def etcdctl(settings: dict, conf: dict, endpoints: list[str], *args: str, timeout: str = "15s",
            check: bool = True) -> subprocess.CompletedProcess:
    argv = [settings["etcdctl"], f"--endpoints={','.join(endpoints)}", *tls_flags(conf),
            "--dial-timeout=3s", f"--command-timeout={timeout}", *args]
    env = dict(os.environ, ETCDCTL_API="3")
    result = subprocess.run(argv, capture_output=True, text=True, env=env)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {result.stderr.strip() or result.stdout.strip()}")
    return result


def reconfigure(settings: dict, conf: dict, endpoints: list[str], *args: str,
                patience: float = 120) -> subprocess.CompletedProcess:
    """A membership change. With strict-reconfig-check the leader refuses ("unhealthy cluster")
    until every voting member has been connected for 5 s, e.g. right after a leader change."""
    deadline = time.monotonic() + patience
    while True:
        result = etcdctl(settings, conf, endpoints, *args, check=False)
        if result.returncode == 0:
            return result
        if "unhealthy cluster" not in result.stderr or time.monotonic() > deadline:
            raise RuntimeError(f"{' '.join(args)} failed: {result.stderr.strip()}")
        time.sleep(1)


def own_client_url(conf: dict) -> str:
    return conf["advertise-client-urls"].split(",")[0]


def listening(urls: list[str], timeout: float = 1.0) -> list[str]:
    """The URLs whose port accepts connections (etcdctl would sit out its dial timeout on the others)."""
    up = []
    for url in urls:
        parts = urllib.parse.urlsplit(url)
        try:
            with socket.create_connection((parts.hostname, parts.port), timeout=timeout):
                up.append(url)
        except OSError:
            continue
    return up


def member_list(settings: dict, conf: dict, endpoints: list[str]) -> list[dict] | None:
    """The cluster's members as any of ``endpoints`` sees them, or None if none answers."""
    endpoints = listening(endpoints)
    if not endpoints:
        return None
    result = etcdctl(settings, conf, endpoints, "member", "list", "--write-out=json", check=False)
    if result.returncode != 0:
        return None
    return json.loads(result.stdout).get("members", [])


# --------------------------------------------------------------------------- prepare

def has_data(data_dir: str) -> bool:
    return os.path.isdir(os.path.join(data_dir, "member"))


def rejoin_steps(my_peer_url: str, members: list[dict]) -> tuple[int | None, bool]:
    """(ID of this member's stale entry to remove, or None; whether to add this member).

    A member that has started before publishes its client URLs; coming back without its data it
    must not reuse its old identity (it may have acknowledged writes it no longer has), so it is
    removed and added again. An entry that never started (listed at bootstrap, or added by an
    earlier attempt that crashed before etcd came up) is joined as it is.
    """
    mine = next((m for m in members if my_peer_url in m.get("peerURLs", [])), None)
    if mine is None:
        return None, True
    if not mine.get("clientURLs"):
        return None, False
    return mine["ID"], True


def initial_cluster(members: list[dict], conf: dict) -> str:
    """``name=peerURL,...`` for the current membership; unstarted members have no name yet."""
    rendered = dict(entry.split("=", 1) for entry in conf["initial-cluster"].split(","))
    names_by_url = {url: name for name, url in rendered.items()}
    my_url = conf["initial-advertise-peer-urls"]
    entries = []
    for member in members:
        for url in member.get("peerURLs", []):
            name = conf["name"] if url == my_url else (member.get("name") or names_by_url.get(url)
                                                        or f"member-{member['ID']:x}")
            entries.append(f"{name}={url}")
    return ",".join(sorted(entries))


def prepare(settings: dict) -> str:
    """Writes the config etcd starts from; returns why it starts the way it does."""
    conf = load_etcd_config(settings)
    mount = settings["disk"]["mount"]
    if not os.path.ismount(mount):
        raise Refusal(f"{mount} is not mounted: etcd must never write to the OS disk (see etcd-disk.service)")
    data_dir = conf["data-dir"]
    os.makedirs(data_dir, mode=0o700, exist_ok=True)
    os.chmod(data_dir, 0o700)
    # etcd runs as its own user; the secrets fetcher writes keys (and their 0700 directory) as root.
    keys = [conf[side]["key-file"] for side in ("client-transport-security", "peer-transport-security")]
    give_to_etcd_user(settings, [data_dir, *sorted({os.path.dirname(key) for key in keys}), *keys])
    if has_data(data_dir):
        effective, reason = conf, "data directory present: starting with it"
    else:
        effective, reason = empty_start(settings, conf)
    write_yaml(settings["effective_config"], effective)
    return reason


def empty_start(settings: dict, conf: dict) -> tuple[dict, str]:
    mine = own_client_url(conf)
    others = [url for url in settings["endpoints"] if url != mine]
    members = member_list(settings, conf, others)
    if members is None or not any(member.get("clientURLs") for member in members):
        # Nobody answers, or nobody has ever started (members publish their client URLs once the
        # cluster has formed): this is the first bootstrap, unless the backup container says the
        # cluster existed. Snapshots age out; the marker does not (its name is outside the
        # lifecycle rule's prefix), so a cluster whose backups stopped long ago is still known.
        existed = cluster_existed(settings["backup"], Blobs(settings["backup"]).list())
        override = settings["new_cluster_override"]
        if existed and not os.path.exists(override):
            raise Refusal(f"data directory empty, no running cluster to rejoin, and {existed}: the cluster "
                          f"lost quorum. Waiting for peers; to recover, run `etcd-member restore` on every "
                          f"member, or to start an EMPTY cluster create {override} on every member "
                          f"(docs/runbooks/etcd.md)")
        if existed:
            return conf, f"first bootstrap of an EMPTY cluster, as {override} asks, although {existed}"
        return conf, "first bootstrap: the cluster has not formed yet and no snapshot exists"
    my_peer_url = conf["initial-advertise-peer-urls"]
    stale_id, add = rejoin_steps(my_peer_url, members)
    if stale_id is not None:
        log(f"removing this member's stale entry {stale_id:x} (it lost its data)")
        reconfigure(settings, conf, others, "member", "remove", f"{stale_id:x}")
    if add:
        log(f"adding {conf['name']} at {my_peer_url}")
        added = reconfigure(settings, conf, others, "member", "add", conf["name"], f"--peer-urls={my_peer_url}",
                            "--write-out=json")
        members = json.loads(added.stdout)["members"]
    effective = dict(conf)
    effective["initial-cluster-state"] = "existing"
    effective["initial-cluster"] = initial_cluster(members, conf)
    return effective, "data directory empty and the cluster is up: joining it as a fresh member"


def cluster_existed(backup_settings: dict, names: list[str]) -> str | None:
    """Why the backup container's blob ``names`` show that this cluster has existed, or None."""
    if backup_settings["formed_marker"] in names:
        return f"the backup container holds {backup_settings['formed_marker']} (written once the cluster had formed)"
    if any(name.startswith(backup_settings["snapshot_prefix"]) for name in names):
        return "snapshots exist in the backup container"
    return None


def give_to_etcd_user(settings: dict, paths: list[str]) -> None:
    user = settings.get("etcd_user")
    if not user:
        return
    entry = pwd.getpwnam(user)
    for path in paths:
        os.chown(path, entry.pw_uid, entry.pw_gid)


def give_tree_to_etcd_user(settings: dict, root: str) -> None:
    user = settings.get("etcd_user")
    if not user:
        return
    entry = pwd.getpwnam(user)
    for directory, _, files in os.walk(root):
        os.chown(directory, entry.pw_uid, entry.pw_gid)
        for name in files:
            os.chown(os.path.join(directory, name), entry.pw_uid, entry.pw_gid)


def write_yaml(path: str, document: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as handle:
        yaml.safe_dump(document, handle, sort_keys=False, default_flow_style=False, width=4096)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


# --------------------------------------------------------------------------- backup

def designated_member(members: list[dict], statuses: list[dict]) -> str | None:
    """The member that takes this round's snapshot: the first healthy follower by name (a snapshot
    reads the whole database, which the leader should not have to do), else the leader alone."""
    healthy = {s["Status"]["header"]["member_id"]: s["Status"] for s in statuses}
    if not healthy:
        return None
    leader = next(iter(healthy.values()))["leader"]
    names = {m["ID"]: m.get("name", "") for m in members}
    followers = sorted(names[i] for i in healthy if i != leader and i in names)
    if followers:
        return followers[0]
    return names.get(leader)


def overdue(newest: float | None, formed: float | None, now: float, takeover_after: float) -> bool:
    """Whether the newest snapshot (or, before the first one, the cluster's forming) is so old that
    the designated member has missed a round: then every member takes a snapshot."""
    reference = newest if newest is not None else formed
    return reference is not None and now - reference > takeover_after


def record_attempt(settings: dict) -> None:
    path = settings["backup"]["attempt_file"]
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    with open(f"{path}.tmp", "w") as handle:
        json.dump({"time": time.time()}, handle)
    os.replace(f"{path}.tmp", path)


def mark_formed(store: Blobs, marker: str, conf: dict, listing: dict[str, float]) -> None:
    """The cluster answers: record that it exists, once, where every future member looks."""
    if marker in listing:
        return
    with tempfile.NamedTemporaryFile("w", suffix=".json") as handle:
        json.dump({"token": conf["initial-cluster-token"], "by": conf["name"]}, handle)
        handle.flush()
        try:
            store.upload(handle.name, marker, {"member": conf["name"]})
        except BlobExists:
            return  # another member wrote it first
    log(f"wrote {marker}: from now on an empty start needs the operator's override")


def backup(settings: dict) -> str:
    record_attempt(settings)
    conf = load_etcd_config(settings)
    mine = own_client_url(conf)
    members = member_list(settings, conf, [mine])
    if members is None:
        raise RuntimeError(f"this member ({mine}) does not answer; no snapshot taken")
    backup_settings = settings["backup"]
    store = Blobs(backup_settings)
    listing = store.modified_times()
    mark_formed(store, backup_settings["formed_marker"], conf, listing)
    override = settings["new_cluster_override"]
    if os.path.exists(override):
        os.remove(override)
        log(f"removed {override}: the cluster is up, so an empty start is refused again")
    statuses = []
    for member in members:
        for url in member.get("clientURLs", [])[:1]:
            result = etcdctl(settings, conf, [url], "endpoint", "status", "--write-out=json", check=False)
            if result.returncode == 0:
                statuses += json.loads(result.stdout)
    chosen = designated_member(members, statuses)
    late = overdue(newest_snapshot(listing, backup_settings["snapshot_prefix"]),
                   listing.get(backup_settings["formed_marker"]), time.time(),
                   backup_settings["takeover_after_seconds"])
    if chosen != conf["name"] and not late:
        return f"{chosen} takes this snapshot, not {conf['name']}"
    if chosen != conf["name"]:
        log(f"the newest snapshot is overdue ({chosen} should have taken it): taking one too")
    membership = initial_cluster(members, conf)
    path, name = take_snapshot(settings, conf, membership)
    status = snapshot_status(settings, path)
    store.upload(path, name, {"member": conf["name"], "revision": str(status["revision"]),
                              MEMBERSHIP_METADATA: membership})
    prune_local(settings)
    return f"snapshot {name} (revision {status['revision']}, {status['totalKey']} keys) uploaded"


def newest_snapshot(listing: dict[str, float], prefix: str) -> float | None:
    times = [modified for name, modified in listing.items() if name.startswith(prefix)]
    return max(times) if times else None


def take_snapshot(settings: dict, conf: dict, membership: str) -> tuple[str, str]:
    """A snapshot file, and next to it (``.json``) the membership it must be restored with."""
    directory = settings["backup"]["local_dir"]
    os.makedirs(directory, mode=0o700, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    file_name = f"{stamp}-{conf['name']}.db"
    path = os.path.join(directory, file_name)
    etcdctl(settings, conf, [own_client_url(conf)], "snapshot", "save", path, timeout="30m")
    with open(f"{path}.json", "w") as handle:
        json.dump({MEMBERSHIP_METADATA: membership}, handle)
    return path, settings["backup"]["snapshot_prefix"] + file_name


def snapshot_tool(settings: dict) -> list[str]:
    """etcdutl owns offline snapshot work from etcd 3.5 on; etcd 3.4's etcdctl did it itself."""
    return [settings["etcdutl"]] if settings.get("etcdutl") else [settings["etcdctl"]]


def snapshot_status(settings: dict, path: str) -> dict:
    argv = [*snapshot_tool(settings), "snapshot", "status", path, "--write-out=json"]
    result = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, ETCDCTL_API="3"))
    if result.returncode != 0:
        raise RuntimeError(f"snapshot {path} is not readable: {result.stderr.strip()}")
    return json.loads(result.stdout)


def prune_local(settings: dict) -> None:
    keep = settings["backup"]["keep_local"]
    snapshots = sorted(glob.glob(os.path.join(settings["backup"]["local_dir"], "*.db")))
    for old in snapshots[:-keep] if keep else snapshots:
        os.remove(old)
        if os.path.exists(f"{old}.json"):
            os.remove(f"{old}.json")


# --------------------------------------------------------------------------- restore

def restore_argv(settings: dict, conf: dict, snapshot: str, data_dir: str, membership: str) -> list[str]:
    argv = [*snapshot_tool(settings), "snapshot", "restore", snapshot,
            f"--name={conf['name']}",
            f"--data-dir={data_dir}",
            f"--initial-cluster={membership}",
            f"--initial-cluster-token={conf['initial-cluster-token']}",
            f"--initial-advertise-peer-urls={conf['initial-advertise-peer-urls']}"]
    if settings.get("etcdutl"):
        argv += [f"--bump-revision={settings['backup']['restore_revision_bump']}", "--mark-compacted"]
    return argv


def restore(settings: dict, snapshot: str | None, blob: str | None) -> str:
    conf = load_etcd_config(settings)
    mine = own_client_url(conf)
    if listening([mine]):
        raise Refusal(f"etcd answers on {mine}: stop it on every member first (systemctl stop etcd)")
    if snapshot is None:
        store = Blobs(settings["backup"])
        blob = blob or latest(store.list(prefix=settings["backup"]["snapshot_prefix"]))
        snapshot = os.path.join(settings["backup"]["local_dir"], os.path.basename(blob))
        os.makedirs(os.path.dirname(snapshot), mode=0o700, exist_ok=True)
        metadata = store.download(blob, snapshot)
        membership = metadata.get(MEMBERSHIP_METADATA)
    else:
        membership = recorded_membership(snapshot)
    if not membership:
        raise Refusal(f"{snapshot} does not record the membership it was taken with; restore a snapshot "
                      f"taken by this version of etcd-member")
    status = snapshot_status(settings, snapshot)
    data_dir = conf["data-dir"]
    peers = dict(entry.split("=", 1) for entry in membership.split(","))
    if conf["name"] not in peers:
        move_aside(data_dir)
        return (f"{conf['name']} joined after {os.path.basename(snapshot)} was taken: its data directory is "
                f"empty, and it joins the restored cluster by itself once the others are up")
    if peers[conf["name"]] != conf["initial-advertise-peer-urls"]:
        raise Refusal(f"the snapshot has {conf['name']} at {peers[conf['name']]}, this machine is "
                      f"{conf['initial-advertise-peer-urls']}")
    # Restore into a scratch directory and move it into place only once etcd accepted the snapshot:
    # a failed restore (a corrupt snapshot fails its hash check after the database was copied)
    # must never leave a data directory that etcd would start from.
    scratch = f"{data_dir}.restoring"
    shutil.rmtree(scratch, ignore_errors=True)
    result = subprocess.run(restore_argv(settings, conf, snapshot, scratch, membership), capture_output=True,
                            text=True, env=dict(os.environ, ETCDCTL_API="3"))
    if result.returncode != 0:
        shutil.rmtree(scratch, ignore_errors=True)
        raise RuntimeError(f"snapshot restore failed, {data_dir} left as it was: "
                           f"{result.stderr.strip().splitlines()[-1:] or result.returncode}")
    move_aside(data_dir)
    os.rename(scratch, data_dir)
    give_tree_to_etcd_user(settings, data_dir)
    return (f"restored {os.path.basename(snapshot)} (revision {status['revision']}) into {data_dir} with the "
            f"snapshot's membership ({len(peers)} members); start etcd once every member is restored "
            f"from the same snapshot")


def move_aside(data_dir: str) -> None:
    if os.path.exists(data_dir):
        aside = f"{data_dir}.before-restore-{int(time.time())}"
        os.rename(data_dir, aside)
        log(f"moved the old data directory to {aside}")


def recorded_membership(snapshot: str) -> str | None:
    """The membership ``take_snapshot`` recorded next to a local snapshot file."""
    try:
        with open(f"{snapshot}.json") as handle:
            return json.load(handle).get(MEMBERSHIP_METADATA)
    except FileNotFoundError:
        return None


def latest(names: list[str]) -> str:
    """Snapshot names start with a UTC timestamp, so the newest sorts last."""
    if not names:
        raise Refusal("no snapshot in Blob storage")
    return sorted(names)[-1]


# --------------------------------------------------------------------------- Blob storage

class BlobExists(RuntimeError):
    """A blob of that name is already there (uploads never overwrite)."""


class Blobs:
    """The cluster's backup container, reached with the VM's managed identity (no keys)."""

    def __init__(self, settings: dict) -> None:
        self.base = f"{settings['account_url'].rstrip('/')}/{settings['container']}"
        self.api_version = settings["api_version"]
        self.token_url = settings["imds_token_url"]
        self.block_bytes = settings["block_bytes"]
        self._token: str | None = None
        # The metadata service and the private endpoint are reached directly, never through a proxy.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def _call(self, request: urllib.request.Request, attempts: int = 5):
        for attempt in range(attempts):
            try:
                return self._opener.open(request, timeout=120)
            except urllib.error.HTTPError as error:
                if error.code == 409 and request.get_header("If-none-match") == "*":
                    raise BlobExists(f"{request.full_url}: 409 already exists") from None
                if error.code < 500 and error.code != 429:
                    raise RuntimeError(f"{request.get_method()} {request.full_url}: {error.code} "
                                       f"{error.read()[:300]!r}") from None
                if attempt == attempts - 1:
                    raise
            except urllib.error.URLError:
                if attempt == attempts - 1:
                    raise
            time.sleep(2 ** attempt)
        raise AssertionError("unreachable")

    def token(self) -> str:
        if self._token is None:
            request = urllib.request.Request(self.token_url, headers={"Metadata": "true"})
            with self._call(request) as response:
                self._token = json.load(response)["access_token"]
        return self._token

    def _request(self, method: str, url: str, data: bytes | None = None,
                 headers: dict[str, str] | None = None) -> urllib.request.Request:
        all_headers = {"Authorization": f"Bearer {self.token()}", "x-ms-version": self.api_version}
        all_headers.update(headers or {})
        return urllib.request.Request(url, data=data, method=method, headers=all_headers)

    def list(self, prefix: str = "", max_results: int | None = None) -> list[str]:
        return list(self.modified_times(prefix, max_results))

    def modified_times(self, prefix: str = "", max_results: int | None = None) -> dict[str, float]:
        """``{blob name: Unix time of its last modification}`` (List Blobs' Last-Modified property)."""
        found: dict[str, float] = {}
        marker = ""
        while True:
            query = {"restype": "container", "comp": "list"}
            if prefix:
                query["prefix"] = prefix
            if marker:
                query["marker"] = marker
            if max_results:
                query["maxresults"] = str(max_results)
            with self._call(self._request("GET", f"{self.base}?{urllib.parse.urlencode(query)}")) as response:
                root = ElementTree.fromstring(response.read())
            for blob in root.iterfind("./Blobs/Blob"):
                modified = blob.findtext("./Properties/Last-Modified")
                found[blob.findtext("Name") or ""] = (
                    email.utils.parsedate_to_datetime(modified).timestamp() if modified else 0.0)
            marker = root.findtext("NextMarker") or ""
            if not marker or (max_results and len(found) >= max_results):
                return found

    def upload(self, path: str, name: str, metadata: dict[str, str]) -> None:
        """Block upload (files of any size), each block MD5-checked by the service, never overwriting."""
        digest = hashlib.sha256()
        block_ids = []
        with open(path, "rb") as handle:
            while chunk := handle.read(self.block_bytes):
                digest.update(chunk)
                block_id = base64.b64encode(f"{len(block_ids):08d}".encode()).decode()
                query = urllib.parse.urlencode({"comp": "block", "blockid": block_id})
                md5 = base64.b64encode(hashlib.md5(chunk).digest()).decode()
                self._call(self._request("PUT", f"{self.base}/{name}?{query}", chunk,
                                         {"Content-MD5": md5, "Content-Length": str(len(chunk))})).close()
                block_ids.append(block_id)
        body = ("<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>"
                + "".join(f"<Latest>{block_id}</Latest>" for block_id in block_ids)
                + "</BlockList>").encode()
        headers = {"If-None-Match": "*", "x-ms-blob-content-type": "application/octet-stream",
                   "x-ms-meta-sha256": digest.hexdigest(), "Content-Length": str(len(body))}
        headers.update({f"x-ms-meta-{key}": value for key, value in metadata.items()})
        self._call(self._request("PUT", f"{self.base}/{name}?comp=blocklist", body, headers)).close()

    def download(self, name: str, path: str) -> dict[str, str]:
        """Downloads and checks the SHA-256 recorded at upload; returns the blob's metadata."""
        digest = hashlib.sha256()
        tmp = f"{path}.part"
        with self._call(self._request("GET", f"{self.base}/{name}")) as response, open(tmp, "wb") as handle:
            metadata = {key.lower()[len("x-ms-meta-"):]: value for key, value in response.headers.items()
                        if key.lower().startswith("x-ms-meta-")}
            expected = metadata.get("sha256")
            while chunk := response.read(1024 * 1024):
                digest.update(chunk)
                handle.write(chunk)
        if expected != digest.hexdigest():
            os.remove(tmp)
            raise RuntimeError(f"{name}: SHA-256 {digest.hexdigest()} does not match the uploaded {expected}")
        os.replace(tmp, path)
        return metadata


# --------------------------------------------------------------------------- metrics

def last_attempt(settings: dict) -> float | None:
    try:
        with open(settings["backup"]["attempt_file"]) as handle:
            return float(json.load(handle)["time"])
    except (OSError, ValueError, KeyError):
        return None


def metrics_text(metrics: dict, newest: float | None, attempt: float | None) -> str:
    """Prometheus text format. A value that is unknown (the container cannot be listed, no attempt
    yet) is left out, so an alert on its absence fires as well as one on its age."""
    labels = f'{{cluster="{metrics["cluster"]}"}}'
    lines = []
    for name, value, help_text in (
            (metrics["last_success"], newest, "Unix time of the newest snapshot in the backup container."),
            (metrics["last_attempt"], attempt, "Unix time of this machine's last backup attempt.")):
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        if value is not None:
            lines.append(f"{name}{labels} {value:.3f}")
    return "\n".join(lines) + "\n"


class FreshnessCache:
    """The newest snapshot's time, listed at most once per ``ttl`` seconds whatever the scrape rate."""

    def __init__(self, settings: dict, ttl: float) -> None:
        self.settings, self.ttl = settings, ttl
        self.value: float | None = None
        self.listed_at = float("-inf")

    def newest(self) -> float | None:
        if time.monotonic() - self.listed_at >= self.ttl:
            backup_settings = self.settings["backup"]
            try:
                listing = Blobs(backup_settings).modified_times(prefix=backup_settings["snapshot_prefix"])
                self.value = newest_snapshot(listing, backup_settings["snapshot_prefix"])
            except (RuntimeError, OSError) as error:
                log(f"cannot list the backup container: {error}")
                self.value = None
            self.listed_at = time.monotonic()
        return self.value


def serve_metrics(settings: dict) -> None:
    """Serves backup freshness on this member's own address (never a wildcard) until stopped."""
    metrics = settings["metrics"]
    host = urllib.parse.urlsplit(own_client_url(load_etcd_config(settings))).hostname
    cache = FreshnessCache(settings, metrics["cache_seconds"])

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            return

        def do_GET(self) -> None:  # noqa: N802 - http.server API
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = metrics_text(metrics, cache.newest(), last_attempt(settings)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer((host, metrics["port"]), Handler)
    log(f"serving backup freshness on http://{host}:{metrics['port']}/metrics")
    server.serve_forever()


# --------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="etcd-member", description=__doc__.splitlines()[0])
    parser.add_argument("--settings", default=SETTINGS_PATH)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("prepare")
    commands.add_parser("backup")
    commands.add_parser("metrics")
    restore_parser = commands.add_parser("restore")
    source = restore_parser.add_mutually_exclusive_group()
    source.add_argument("--snapshot", help="a local snapshot file (default: the latest in Blob storage)")
    source.add_argument("--blob", help="a snapshot's name in the backup container")
    args = parser.parse_args(argv)
    settings = load_settings(args.settings)
    try:
        if args.command == "prepare":
            log(prepare(settings))
        elif args.command == "backup":
            log(backup(settings))
        elif args.command == "metrics":
            serve_metrics(settings)
        else:
            log(restore(settings, args.snapshot, args.blob))
    except Refusal as refusal:
        log(f"refusing: {refusal}")
        return 2
    except (RuntimeError, OSError) as error:
        log(f"error: {error}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
