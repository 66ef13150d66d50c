"""Behaviour 8, second half: a node Prometheus shard scrapes the real kubelets' metrics.

The data-plane box (real kubelets, tests/e2e/runtime.py); one replica of the node shard runs with its
rendered config in its real pod's network namespace (tests/e2e/prometheus.py). Each real kubelet
answers the shard's scrape over HTTPS only with the pod's service-account token, which the kubelet
has the apiserver check (webhook authentication and authorization, ``nodes/metrics``). The kubelet
jobs the shard runs are checked to authenticate exactly as prod's rendered node shard does, so the
box proves prod's setting: without it every kubelet answers 401 and no target is up.
"""

from __future__ import annotations

import pytest
import yaml

from infra.addons import monitoring
from infra.addons.monitoring import rules
from infra.addons.monitoring.shards import KUBELET_PORT
from infra.facts.labels import ROLE_LABEL, ROLE_SYSTEM
from tests.e2e.cluster import Cluster, boot, plan_stack
from tests.e2e.hosts import wait_for
from tests.e2e.prometheus import Shard, replica_name, start_shard
from tests.e2e.test_prometheus import NODE_SHARD, SCRAPE_TIMEOUT, _describe

pytestmark = pytest.mark.e2e

# The kubelet's jobs: its own metrics and cAdvisor's, both on its HTTPS port with the token.
KUBELET_JOBS = (rules.JOB_KUBELET, rules.JOB_CADVISOR)
# How a scrape job authenticates and checks the kubelet's serving certificate.
AUTHENTICATION = ("scheme", "authorization", "tls_config")
BIND_TIMEOUT = 180  # the scaled-down pods leave the node (kubelet stops their sandboxes) before the shard binds


@pytest.fixture(scope="module")
def prod_kubelet_jobs(tmp_path_factory) -> dict[str, dict]:
    """The kubelet scrape jobs of prod's rendered node shard, from the plan prod deploys."""
    return _kubelet_jobs(plan_stack("prod", tmp_path_factory.mktemp("prodplan") / "plan", []).kubernetes_objects())


def _kubelet_jobs(objects) -> dict[str, dict]:
    name = monitoring.shard_workload(NODE_SHARD)
    (config,) = [d for _, d in objects if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name]
    jobs = yaml.safe_load(config["data"]["prometheus.yml"])["scrape_configs"]
    return {j["job_name"]: j for j in jobs if j["job_name"] in KUBELET_JOBS}


@pytest.fixture(scope="module")
def box(binaries, tmp_path_factory) -> Cluster:
    cluster = boot("dev", tmp_path_factory.mktemp("nodemetrics"), binaries, nodes_per_pool=1, real_nodes=True)
    yield cluster
    cluster.close()


@pytest.fixture(scope="module")
def shard(box: Cluster) -> Shard:
    make_room_for_the_node_shard(box)
    name = replica_name(NODE_SHARD, 0)
    wait_for(
        f"{name} to be bound once the system pool has room",
        lambda: box.get_json("pod", name, "-n", monitoring.NAMESPACE)["spec"].get("nodeName"),
        timeout=BIND_TIMEOUT,
        interval=2,
        on_timeout=lambda: box.kubectl("describe", "pod", name, "-n", monitoring.NAMESPACE, check=False).stdout,
    )
    # No hosts file names: the kubelet targets are node addresses.
    return start_shard(box, NODE_SHARD, 0, {})


def make_room_for_the_node_shard(box: Cluster) -> None:
    """The system pool's other workloads scaled to none and the node shard to its replica 0: a real kubelet
    reports this machine's 2 cores, not the VM size's, so one system node holds only one Prometheus replica,
    and both replicas are created at once, so replica 1 could otherwise take the node first."""
    workload = monitoring.shard_workload(NODE_SHARD)
    for _, document in box.plan.kubernetes_objects():
        template = document.get("spec", {}).get("template", {}).get("spec", {})
        on_system = template.get("nodeSelector", {}).get(ROLE_LABEL) == ROLE_SYSTEM
        if document["kind"] in ("Deployment", "StatefulSet") and on_system:
            metadata = document["metadata"]
            replicas = 1 if metadata["name"] == workload else 0
            box.kubectl(
                "scale",
                document["kind"].lower(),
                metadata["name"],
                "-n",
                metadata["namespace"],
                f"--replicas={replicas}",
            )


def test_the_node_shard_scrapes_every_real_kubelet(box: Cluster, shard: Shard, prod_kubelet_jobs: dict[str, dict]):
    running = _kubelet_jobs(
        [(None, box.get_json("configmap", "-n", monitoring.NAMESPACE, monitoring.shard_workload(NODE_SHARD)))]
    )
    for job in KUBELET_JOBS:
        assert {k: running[job].get(k) for k in AUTHENTICATION} == {
            k: prod_kubelet_jobs[job].get(k) for k in AUTHENTICATION
        }, f"{job}: the box's node shard does not authenticate to the kubelet as prod's renders"
    nodes = {n.machine.name: n.machine.ip for n in box.real_nodes}

    def scraped() -> dict[str, dict[str, dict]] | None:
        by_job = {job: {} for job in KUBELET_JOBS}
        for target in shard.targets():
            if target["labels"]["job"] in by_job:
                by_job[target["labels"]["job"]][target["labels"]["node"]] = target
        done = all(set(t) == set(nodes) and all(x["health"] == "up" for x in t.values()) for t in by_job.values())
        return by_job if done else None

    try:
        by_job = wait_for("every real kubelet to be scraped", scraped, timeout=SCRAPE_TIMEOUT, interval=5)
    except TimeoutError:
        targets = [t for t in shard.targets() if t["labels"]["job"] in KUBELET_JOBS]
        pytest.fail("the node shard's kubelet targets:\n" + _describe({"kubelet": targets}))
    for name, ip in nodes.items():
        assert by_job[rules.JOB_KUBELET][name]["scrapeUrl"] == f"https://{ip}:{KUBELET_PORT}/metrics"
    # The samples were kept and stored: each kubelet names its own node.
    series = shard.query(f'kubelet_node_name{{job="{rules.JOB_KUBELET}"}}')
    assert {s["metric"]["node"] for s in series} == set(nodes), series
