"""The Alertmanager gossip mesh admits only replicas holding its certificate, with the real Alertmanager.

Alertmanager (the release the cluster runs, built by scripts/build-monitoring-tools.sh) runs on loopback with the
rendered configuration and the rendered ``--cluster.tls-config``, its file paths pointed at a folder of the test's
(the pod mounts them at ``alertmanager.CLUSTER_TLS_DIR``), with certificates issued as the deploy issues them
(tests/e2e/pki.py). On the design before, the mesh took any peer that reached its port: the outsider without TLS
joined a replica started without ``--cluster.tls-config``.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from infra.addons.monitoring import alertmanager
from tests.e2e.pki import alertmanager_mesh
from tests.etcd_local import free_ports
from tests.helpers import monitoring_tool

pytestmark = pytest.mark.slow  # real processes and gossip rounds (seconds)

JOIN_TIMEOUT = 60  # memberlist joins within a few gossip rounds; CI's two loaded cores are slower
SETTLE = 15  # how long an outsider is given to get in


class Replica:
    def __init__(self, root: Path, name: str, mesh: dict[str, str] | None, peers: list[int]) -> None:
        folder = root / name
        (folder / "data").mkdir(parents=True)
        (folder / "alertmanager.yml").write_text(alertmanager.config((), "test"))
        self.web, self.gossip = free_ports(2)
        argv = [
            monitoring_tool("alertmanager"),
            f"--config.file={folder / 'alertmanager.yml'}",
            f"--storage.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.web}",
            f"--cluster.listen-address=127.0.0.1:{self.gossip}",
            *(f"--cluster.peer=127.0.0.1:{port}" for port in peers),
        ]
        if mesh is not None:
            for key, pem in mesh.items():
                (folder / key).write_text(pem)
            tls = alertmanager.cluster_tls_config().replace(alertmanager.CLUSTER_TLS_DIR, str(folder))
            (folder / alertmanager.CLUSTER_TLS_CONFIG).write_text(tls)
            argv.append(f"--cluster.tls-config={folder / alertmanager.CLUSTER_TLS_CONFIG}")
        self.log = folder / "log"
        with self.log.open("w") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)

    def peers(self) -> int:
        """How many members this replica's mesh holds (itself included); 0 while its API is not up."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.web}/api/v2/status", timeout=5) as answer:
                return len(json.load(answer)["cluster"].get("peers") or [])
        except OSError:
            return 0

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


def _wait(what: str, check, timeout: float, replicas: list[Replica]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(1)
    logs = "\n".join(f"--- {r.log}\n{r.log.read_text()[-2000:]}" for r in replicas)
    raise AssertionError(f"timed out waiting for {what}\n{logs}")


@pytest.fixture
def started(tmp_path: Path):
    running: list[Replica] = []

    def start(name: str, mesh: dict[str, str] | None, peers: list[int]) -> Replica:
        replica = Replica(tmp_path, name, mesh, peers)
        running.append(replica)
        return replica

    yield start, running
    for replica in running:
        replica.stop()


def test_only_replicas_holding_the_meshs_certificate_join_it(started):
    start, running = started
    mesh = alertmanager_mesh()
    first = start("alertmanager-0", mesh, [])
    second = start("alertmanager-1", mesh, [first.gossip])
    _wait("the two replicas to form one mesh", lambda: first.peers() == second.peers() == 2, JOIN_TIMEOUT, running)
    # An outsider that reaches the port: with a certificate of another CA, and with no TLS at all.
    foreign = start("foreign-ca", alertmanager_mesh(), [first.gossip, second.gossip])
    plain = start("no-tls", None, [first.gossip, second.gossip])
    _wait("the outsiders' APIs", lambda: foreign.peers() and plain.peers(), JOIN_TIMEOUT, running)
    deadline = time.monotonic() + SETTLE
    while time.monotonic() < deadline:
        assert (first.peers(), second.peers(), foreign.peers(), plain.peers()) == (2, 2, 1, 1)
        time.sleep(1)


def test_without_the_tls_configuration_an_outsider_joins(started):
    """The control: the same outsider joins a replica that gossips in the clear, as every replica did before."""
    start, running = started
    open_replica = start("open", None, [])
    start("no-tls", None, [open_replica.gossip])
    _wait("the outsider to join the open replica", lambda: open_replica.peers() == 2, JOIN_TIMEOUT, running)
