"""A gang-scheduled InfiniBand job on the real scheduler: it lands whole, inside one InfiniBand domain.

The dev stack with its GPU pool grown to two InfiniBand shards (two domains), two nodes joined in
each, every node registering the labels its shard's rendered kubelet unit gives it. The jobs are
exactly what ``plan.infiniband_job.infiniband_job`` builds for a researcher.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest
import yaml

from infra.config.sizing import MAX_VMS_PER_PLACEMENT_GROUP, shards
from infra.control_plane.scheduler import POD_GROUP_LABEL
from infra.facts.labels import GPU_STARTUP_TAINT_KEY, INFINIBAND_DOMAIN_LABEL, POOL_LABEL
from infra.node.pool import infiniband_domain
from plan.infiniband_job import infiniband_job
from tests.e2e.cluster import Cluster, boot
from tests.e2e.hosts import wait_for

pytestmark = pytest.mark.e2e

GPU_POOL = "gpu"
NODES_PER_DOMAIN = 2


@pytest.fixture(scope="module")
def ib(binaries, tmp_path_factory) -> Cluster:
    # Two InfiniBand shards: one more node than a single-placement-group scale set holds.
    cluster = boot(
        "dev",
        tmp_path_factory.mktemp("ib"),
        binaries,
        overrides=[f"nodePools[0].maxNodes={MAX_VMS_PER_PLACEMENT_GROUP + 1}"],
        nodes_per_shard=NODES_PER_DOMAIN,
    )
    # The GPU health check lifts the start-up taint from healthy nodes; its pods are simulated here.
    for node in cluster.get_json("nodes", "-l", f"{POOL_LABEL}={GPU_POOL}")["items"]:
        cluster.kubectl("taint", "node", node["metadata"]["name"], f"{GPU_STARTUP_TAINT_KEY}-")
    yield cluster
    cluster.close()


def _domains(cluster: Cluster) -> dict[str, str]:
    """``{node: InfiniBand domain}`` of the GPU pool's nodes, as they registered."""
    return {
        n["metadata"]["name"]: n["metadata"]["labels"].get(INFINIBAND_DOMAIN_LABEL)
        for n in cluster.get_json("nodes", "-l", f"{POOL_LABEL}={GPU_POOL}")["items"]
    }


def _submit(cluster: Cluster, name: str, nodes: int) -> None:
    pool = cluster.spec.config.pool(GPU_POOL)
    objects = infiniband_job(
        name=name, namespace="default", pool=pool, nodes=nodes, image="registry.k8s.io/pause:3.10", command=["/pause"]
    )
    cluster.kubectl("create", "-f", "-", input=yaml.safe_dump_all(objects))


def _placed(cluster: Cluster, name: str) -> list[str | None]:
    pods = cluster.get_json("pods", "-n", "default", "-l", f"{POD_GROUP_LABEL}={name}")["items"]
    return [p["spec"].get("nodeName") for p in pods]


def _delete(cluster: Cluster, *names: str) -> None:
    for name in names:
        cluster.kubectl("delete", "job,service,podgroup", name, "-n", "default", "--wait=false", check=False)
        cluster.kubectl(
            "delete", "pods", "-n", "default", "-l", f"{POD_GROUP_LABEL}={name}", "--wait=false", check=False
        )


def test_each_shard_registers_as_its_own_infiniband_domain(ib: Cluster):
    expected = {infiniband_domain(shard): NODES_PER_DOMAIN for shard in shards(ib.spec.config.pool(GPU_POOL))}
    assert len(expected) == 2
    assert Counter(_domains(ib).values()) == expected


def test_a_gang_lands_whole_inside_one_domain_and_one_that_no_domain_holds_waits(ib: Cluster):
    domains = _domains(ib)
    run = uuid.uuid4().hex[:6]
    too_big, fits = f"wide-{run}", f"fits-{run}"
    try:
        # Three ranks: the four GPU nodes could hold them, but no single domain can.
        _submit(ib, too_big, NODES_PER_DOMAIN + 1)
        time.sleep(15)  # several scheduling attempts of the whole gang
        assert _placed(ib, too_big) == [None] * (NODES_PER_DOMAIN + 1), "a gang spanning two domains was bound"
        _delete(ib, too_big)
        wait_for("the wide gang's pods to go", lambda: not _placed(ib, too_big), timeout=60)

        _submit(ib, fits, NODES_PER_DOMAIN)
        nodes = wait_for(
            "the gang to bind whole",
            lambda: (p := _placed(ib, fits)) and len(p) == NODES_PER_DOMAIN and all(p) and p,
            timeout=90,
        )
        assert len(set(nodes)) == NODES_PER_DOMAIN, f"two ranks share a node: {nodes}"
        assert len({domains[n] for n in nodes}) == 1, f"the gang spans domains: {[domains[n] for n in nodes]}"
    finally:
        _delete(ib, too_big, fits)
