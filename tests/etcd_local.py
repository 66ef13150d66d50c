"""Runs real etcd members on loopback from the files an etcd VM would receive.

Each member's cloud-init is rendered by ``infra.etcd.member_machine`` and parsed back; its etcd config
file, member-tool settings and the member tool itself are used as rendered, with only addresses
(member IP -> 127.0.0.1 and free ports) and paths (into a temporary directory) rewritten. The
certificates follow ``infra.etcd.certificates``'s profiles, made here with ``openssl``.
"""

from __future__ import annotations

import inspect
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml

from infra.boot.secret_names import ETCD_PKI_DIR
from infra.etcd import certificates
from infra.etcd.backup import SNAPSHOT_PREFIX
from infra.etcd.config_file import CONFIG_PATH, MOUNT_POINT
from infra.etcd.member_machine import (
    EFFECTIVE_CONFIG_PATH,
    NEW_CLUSTER_OVERRIDE_PATH,
    TOOL_PATH,
    TOOL_SETTINGS_PATH,
    member_cloud_init,
)
from infra.etcd.spec import CLIENT_PORT, METRICS_PORT, PEER_PORT, ROLES, EtcdClusterSpec, EtcdMember
from machine.etcd import member as member_tool
from plan.artifacts import file_content
from tests.fake_azure_blob import FakeBlobService
from tests.helpers import load_yaml

# How long the member tool keeps asking for a membership change the leader refuses as "unhealthy cluster".
RECONFIGURE_PATIENCE_S = inspect.signature(member_tool.reconfigure).parameters["patience"].default

OPENSSL_USES = {
    "digital_signature": "digitalSignature",
    "key_encipherment": "keyEncipherment",
    "server_auth": "serverAuth",
    "client_auth": "clientAuth",
}


def _ephemeral_floor() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as handle:
            return int(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default ip_local_port_range starts here


def free_ports(count: int) -> list[int]:
    """Free loopback ports below the kernel's ephemeral range: a member stopped and started again
    (a restore) needs its ports back, and a port from the ephemeral range may meanwhile have been
    handed to some outgoing connection, which made etcd exit with "address already in use"."""
    rng = random.Random()
    floor = _ephemeral_floor()
    ports: list[int] = []
    while len(ports) < count:
        port = rng.randrange(20000 if floor > 21000 else 1024, floor)
        if port in ports:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
    return ports


def openssl_cert(
    directory: Path, stem: str, profile: certificates.CertProfile, ip: str, ca: tuple[Path, Path] | None = None
) -> tuple[Path, Path]:
    """An ECDSA P-256 certificate following ``profile`` (the member IP replaced by ``ip``)."""
    crt, key = directory / f"{stem}.crt", directory / f"{stem}.key"
    argv = [
        "openssl",
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        str(key),
        "-out",
        str(crt),
        "-days",
        "2",
        "-subj",
        f"/O={profile.organization}/CN={profile.common_name}",
    ]
    if ca is None:
        argv += [
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        ]
    else:
        key_uses = [OPENSSL_USES[u] for u in profile.allowed_uses if u in ("digital_signature", "key_encipherment")]
        ext_uses = [OPENSSL_USES[u] for u in profile.allowed_uses if u in ("server_auth", "client_auth")]
        sans = [f"IP:{ip}" for _ in profile.ip_addresses] + [f"DNS:{name}" for name in profile.dns_names]
        argv += [
            "-CA",
            str(ca[0]),
            "-CAkey",
            str(ca[1]),
            "-addext",
            "basicConstraints=critical,CA:FALSE",
            "-addext",
            "keyUsage=critical," + ",".join(key_uses),
            "-addext",
            "extendedKeyUsage=" + ",".join(ext_uses),
        ]
        if sans:
            argv += ["-addext", "subjectAltName=" + ",".join(sans)]
    subprocess.run(argv, check=True, capture_output=True)
    return crt, key


class LocalMember:
    def __init__(self, root: Path, member: EtcdMember) -> None:
        self.member = member
        self.root = root
        self.ports = dict(zip(("client", "peer", "metrics", "backup_metrics"), free_ports(4), strict=True))
        self.process: subprocess.Popen | None = None
        self.log = root / "etcd.log"

    @property
    def name(self) -> str:
        return self.member.name

    @property
    def client_url(self) -> str:
        return f"https://127.0.0.1:{self.ports['client']}"

    def rewrite_addresses(self, text: str) -> str:
        ip = self.member.ip
        text = text.replace(f"https://{ip}:{CLIENT_PORT}", self.client_url)
        text = text.replace(f"https://{ip}:{PEER_PORT}", f"https://127.0.0.1:{self.ports['peer']}")
        return text.replace(f"http://{ip}:{METRICS_PORT}", f"http://127.0.0.1:{self.ports['metrics']}")

    def rewrite_paths(self, text: str) -> str:
        text = text.replace(ETCD_PKI_DIR, str(self.root / "pki"))
        text = text.replace(MOUNT_POINT, str(self.root / "disk"))
        text = text.replace(EFFECTIVE_CONFIG_PATH, str(self.root / "run" / "etcd.yaml"))
        text = text.replace(NEW_CLUSTER_OVERRIDE_PATH, str(self.override))
        return text.replace(CONFIG_PATH, str(self.root / "etcd.yaml"))

    @property
    def override(self) -> Path:
        """Where the operator's start-an-empty-cluster file lives on this member."""
        return self.root / "start-empty-cluster"

    @property
    def data_dir(self) -> Path:
        return Path(load_yaml((self.root / "etcd.yaml").read_text())["data-dir"])

    def start(self) -> None:
        effective = self.root / "run" / "etcd.yaml"
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [shutil.which("etcd"), f"--config-file={effective}"], stdout=log, stderr=log, start_new_session=True
            )

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None


class EtcdCas:
    """The etcd CAs as components/etcd_pki.py issues them: one per etcd cluster, one for the apiserver's
    client certificate (issued here too, as the only client both clusters admit)."""

    def __init__(self, directory: Path, cluster_name: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.by_role = {
            role: openssl_cert(directory, f"{role}-ca", certificates.ca_profile(cluster_name, role), "")
            for role in ROLES
        }
        self.client_ca = openssl_cert(directory, "client-ca", certificates.client_ca_profile(cluster_name), "")
        self.client = openssl_cert(directory, "client", certificates.apiserver_client_profile(), "", self.client_ca)

    def member_trust(self, role: str) -> dict[str, str]:
        """The CA files a member of ``role`` fetches, by file name, as their Key Vault secrets hold them."""
        own = self.by_role[role][0].read_text()
        return {
            Path(certificates.CA_FILE).name: own,
            Path(certificates.CLIENT_CAS_FILE).name: certificates.bundle(own, self.client_ca[0].read_text()),
        }


class LocalCluster:
    """The rendered members of ``cluster`` on loopback, backed by a fake Blob service. ``cas``: the etcd CAs,
    shared when a test runs both clusters."""

    def __init__(
        self, root: Path, cluster: EtcdClusterSpec, blobs: FakeBlobService, cas: EtcdCas | None = None
    ) -> None:
        self.blobs = blobs
        self.members = [LocalMember(root / member.name, member) for member in cluster.members]
        self.tool = root / "etcd-member"
        self.cas = cas or EtcdCas(root / "ca", cluster.cluster_name)
        ca = self.cas.by_role[cluster.role]
        client = self.cas.client
        self.client_tls = [f"--cacert={ca[0]}", f"--cert={client[0]}", f"--key={client[1]}"]
        for local in self.members:
            (local.root / "pki").mkdir(parents=True)
            (local.root / "disk").mkdir()
            self.install(local, cluster)
            for name, text in self.cas.member_trust(cluster.role).items():
                (local.root / "pki" / name).write_text(text)
            openssl_cert(local.root / "pki", "server", certificates.server_profile(local.member), "127.0.0.1", ca)
            openssl_cert(local.root / "pki", "peer", certificates.peer_profile(local.member), "127.0.0.1", ca)

    def install(self, local: LocalMember, cluster: EtcdClusterSpec) -> None:
        """Writes the files ``cluster``'s rendering gives ``local`` (e.g. the config of the deploy that
        created that member: a grown cluster's older members keep their first config)."""
        files = self._rendered_files(cluster, local.member)
        self.tool.write_text(files[TOOL_PATH])
        (local.root / "etcd.yaml").write_text(self._rewrite(local, files[CONFIG_PATH]))
        settings = json.loads(self._rewrite(local, files[TOOL_SETTINGS_PATH]))
        settings.update(etcd_user=None, etcdctl=shutil.which("etcdctl"), etcdutl=shutil.which("etcdutl"))
        settings["disk"]["mount"] = "/"  # a real mount point, so prepare's mount check holds
        settings["backup"].update(
            account_url=self.blobs.url, imds_token_url=self.blobs.imds_token_url, block_bytes=16384
        )
        settings["metrics"]["port"] = local.ports["backup_metrics"]
        (local.root / "member.json").write_text(json.dumps(settings))

    @staticmethod
    def _rendered_files(cluster: EtcdClusterSpec, member: EtcdMember) -> dict[str, str]:
        document = load_yaml(member_cloud_init(cluster, member, "test-vault"))
        return {entry["path"]: file_content(entry) for entry in document["write_files"]}

    def _rewrite(self, owner: LocalMember, text: str) -> str:
        """Every member's addresses (initial-cluster, endpoints), then the owner's machine paths."""
        for local in self.members:
            text = local.rewrite_addresses(text)
        return owner.rewrite_paths(text)

    def set_config(self, key: str, value) -> None:
        for local in self.members:
            path = local.root / "etcd.yaml"
            conf = load_yaml(path.read_text())
            conf[key] = value
            path.write_text(yaml.safe_dump(conf, sort_keys=False))

    def tool_run(self, local: LocalMember, *args: str) -> subprocess.CompletedProcess:
        """The member tool run to completion, given a minute beyond its own patience for a membership change (while
        the leader answers "unhealthy cluster"), so the tool's own deadline, with its reason, comes first: a 60-s
        bound killed a member add that was still waiting on a loaded machine (the slow stage of 2026-11-27 11:18)."""
        return subprocess.run(
            [sys.executable, str(self.tool), f"--settings={local.root / 'member.json'}", *args],
            capture_output=True,
            text=True,
            timeout=RECONFIGURE_PATIENCE_S + 60,
        )

    def tool_all(self, *args: str, members: list[LocalMember] | None = None) -> list[subprocess.CompletedProcess]:
        """Runs the tool on every member (or ``members``) at once, as the members' own boots would."""
        procs = [
            subprocess.Popen(
                [sys.executable, str(self.tool), f"--settings={m.root / 'member.json'}", *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for m in (self.members if members is None else members)
        ]
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=60)
            results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
        return results

    def etcdctl(self, endpoints: list[str], *args: str, check: bool = True) -> subprocess.CompletedProcess:
        argv = [shutil.which("etcdctl"), f"--endpoints={','.join(endpoints)}", *self.client_tls, *args]
        return subprocess.run(
            argv, capture_output=True, text=True, check=check, timeout=30, env=dict(os.environ, ETCDCTL_API="3")
        )

    def wait_healthy(self, members: list[LocalMember], timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while True:
            result = self.etcdctl(
                [m.client_url for m in members],
                "endpoint",
                "health",
                "--dial-timeout=500ms",
                "--command-timeout=1s",
                check=False,
            )
            if result.returncode == 0:
                return
            for member in members:
                if member.process is not None and member.process.poll() is not None:
                    raise AssertionError(f"{member.name} exited:\n{member.log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {m.name}\n{m.log.read_text()[-2000:]}" for m in members if m.log.exists())
                raise AssertionError(f"etcd never became healthy: {result.stderr}\n{logs}")
            time.sleep(0.2)

    def stop_all(self) -> None:
        for member in self.members:
            member.stop()


def snapshots(cluster) -> dict:
    return {name: blob for name, blob in cluster.blobs.blobs.items() if name.startswith(SNAPSHOT_PREFIX)}


def get(cluster, member, key) -> str | None:
    """A serializable read: answered from that member's own copy of the data."""
    result = cluster.etcdctl([member.client_url], "get", key, "--consistency=s", "--print-value-only")
    return result.stdout.strip() or None


# What the real-etcd tests write and read back (a few kilobytes, enough to show in a snapshot).
KEYS = {f"/registry/test/key-{i}": f"value-{i}" * 40 for i in range(6)}
