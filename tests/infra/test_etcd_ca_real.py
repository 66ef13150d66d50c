"""Real etcd: a certificate of one etcd cluster opens neither port of the other.

Both clusters of dev run from their rendered files on loopback (tests/etcd_local.py), with the etcd CAs as
the plan issues them. The apiserver's client certificate is the one identity both clusters' client ports
admit; each cluster's members are refused by the other cluster on both ports, and the apiserver's
certificate by every peer port. Each refusal has its control: the same call with the owner's certificate
succeeds.
"""

from __future__ import annotations

import http.client
import ssl
from pathlib import Path

import pytest

from infra.etcd.spec import EVENTS, MAIN
from tests.etcd_local import EtcdCas, LocalCluster
from tests.etcd_specs import clusters
from tests.fake_azure_blob import FakeBlobService
from tests.helpers import require_tool

pytestmark = pytest.mark.slow


@pytest.fixture
def both(tmp_path):
    for tool in ("etcd", "etcdctl", "openssl"):
        require_tool(tool)
    _, main, events = clusters("dev")
    cas = EtcdCas(tmp_path / "ca", main.cluster_name)
    started: list[LocalCluster] = []
    services: list[FakeBlobService] = []
    try:
        for spec in (main, events):
            blobs = FakeBlobService(container=spec.backup_container).start()
            services.append(blobs)
            local = LocalCluster(tmp_path / spec.role, spec, blobs, cas)
            started.append(local)
            for result in local.tool_all("prepare"):
                assert result.returncode == 0, result.stderr
            for member in local.members:
                member.start()
        for local in started:
            local.wait_healthy(local.members)
        yield dict(zip((MAIN, EVENTS), started, strict=True))
    finally:
        for local in started:
            local.stop_all()  # never leave an etcd behind
        for blobs in services:
            blobs.stop()


def _member_pki(local: LocalCluster) -> Path:
    return local.members[0].root / "pki"


def _client_port_get(target: LocalCluster, cert: Path, key: Path):
    """etcdctl against ``target``'s client port, verifying it with ``target``'s own CA, as ``cert``."""
    cacert = _member_pki(target) / "ca.crt"
    argv = ["--dial-timeout=2s", "--command-timeout=3s", "get", "/", "--prefix", "--keys-only"]
    tls = [f"--cacert={cacert}", f"--cert={cert}", f"--key={key}"]
    saved = target.client_tls
    target.client_tls = tls
    try:
        return target.etcdctl([target.members[0].client_url], *argv, check=False)
    finally:
        target.client_tls = saved


def _peer_port_status(target: LocalCluster, cert: Path, key: Path) -> int | str:
    """GET /members on ``target``'s peer port as ``cert``: the HTTP status, or how the handshake ended."""
    member = target.members[0]
    context = ssl.create_default_context(cafile=str(_member_pki(target) / "ca.crt"))
    context.load_cert_chain(str(cert), str(key))
    connection = http.client.HTTPSConnection("127.0.0.1", member.ports["peer"], context=context, timeout=5)
    try:
        connection.request("GET", "/members")
        return connection.getresponse().status
    except (TimeoutError, ssl.SSLError, ConnectionError) as error:
        return f"refused: {error}"
    finally:
        connection.close()


def test_a_certificate_of_one_etcd_cluster_opens_neither_port_of_the_other(both):
    main, events = both[MAIN], both[EVENTS]
    client_cert, client_key = both[MAIN].cas.client

    # The apiserver's client certificate reads both clusters (the control for every refusal below).
    for local in (main, events):
        result = _client_port_get(local, client_cert, client_key)
        assert result.returncode == 0, result.stderr

    for own, other in ((main, events), (events, main)):
        pki = _member_pki(own)
        # A member's certificate (the server one doubles as its client identity) reads its own cluster...
        assert _client_port_get(own, pki / "server.crt", pki / "server.key").returncode == 0
        # ...and is refused by the other cluster's client port.
        refused = _client_port_get(other, pki / "server.crt", pki / "server.key")
        assert refused.returncode != 0, f"{own.members[0].name}'s certificate read {other.members[0].name}"
        # A peer certificate gets through its own cluster's peer port and not the other's.
        assert _peer_port_status(own, pki / "peer.crt", pki / "peer.key") == 200
        status = _peer_port_status(other, pki / "peer.crt", pki / "peer.key")
        assert isinstance(status, str), (
            f"{own.members[0].name}'s peer certificate got {status} from {other.members[0].name}"
        )
        # The apiserver's client certificate is no peer of either cluster.
        status = _peer_port_status(own, client_cert, client_key)
        assert isinstance(status, str), f"the apiserver's client certificate got {status} from a peer port"
