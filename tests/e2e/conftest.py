"""Fixtures of the cluster-in-a-box stage: the binaries, and the booted clusters (one per test module).

This stage runs apart from the fast suite (``scripts/test.sh`` runs both; docs/cluster-in-a-box.md):
it needs root (network namespaces, bind mounts), the Go toolchain for the first build, and
about two minutes once the binaries are cached.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from infra.facts.labels import ROLE_SYSTEM
from plan.stackfile import PROJECT_DIR, stack_cluster_spec
from tests.e2e.cluster import Cluster, boot

# Hooks: every e2e test fails when a unit restarted during it (tests/e2e/restarts.py).
from tests.e2e.restarts import pytest_configure, pytest_runtest_call, pytest_runtest_setup  # noqa: F401


def _unavailable(why: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"cluster in a box: {why}")
    pytest.skip(f"cluster in a box: {why}")


@pytest.fixture(scope="session")
def binaries() -> Path:
    """The upstream binaries at the pinned versions (built once per machine, then cached)."""
    if os.geteuid() != 0:
        _unavailable("needs root for network namespaces")
    if shutil.which("go") is None:
        _unavailable("needs the Go toolchain to build the pinned binaries")
    result = subprocess.run(
        ["bash", str(PROJECT_DIR / "scripts" / "build-binaries.sh")], capture_output=True, text=True, timeout=3000
    )
    if result.returncode != 0:
        pytest.fail(f"building the binaries failed:\n{result.stderr[-3000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def dev(binaries: Path, tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    cluster = boot("dev", tmp_path_factory.mktemp("dev"), binaries)
    yield cluster
    cluster.close()


@pytest.fixture(scope="module")
def prod(binaries: Path, tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    # prod's control plane exactly as rendered (5 etcd + 3 events-etcd members, 5 apiservers) and nodes, so
    # prod-only workloads schedule: one of each pool, a system pool at its minNodes (what the cluster starts
    # with: every Prometheus shard's two replicas, on different nodes, must fit its pod IPs), and the NAT
    # hosts. The first GPU pool's node is a real node (kubelet, containerd, runc), where one-GPU pods are
    # admitted and run; the rest run nodesim: a real node runs about six processes on this 2-core machine,
    # which already carries prod's 23 control-plane ones.
    pools = stack_cluster_spec("prod", []).config.node_pools
    per_pool = {pool.name: max(2, pool.min_nodes) if pool.role == ROLE_SYSTEM else 1 for pool in pools}
    real_pool = next(pool.name for pool in pools if pool.size.gpus)
    cluster = boot("prod", tmp_path_factory.mktemp("prod"), binaries, nodes_per_pool=per_pool, real_nodes=[real_pool])
    yield cluster
    cluster.close()
