"""Behaviour 8: the control-plane Prometheus shard scrapes the control plane with its rendered config,
and a node shard the nodes.

The dev plan booted (its own cluster); one replica of the control-plane shard and one of the
node shard run as tests/e2e/prometheus.py describes. Every assertion reads the running
Prometheus's own API: its active targets and its rule groups.
"""

from __future__ import annotations

import pytest
import yaml

from infra.addons import monitoring
from infra.addons.monitoring import rules
from infra.addons.monitoring.shards import KUBELET_PORT
from infra.etcd.spec import EVENTS, MAIN
from infra.etcd.spec import METRICS_PORT as ETCD_METRICS_PORT
from tests.e2e import pod_processes
from tests.e2e.cluster import Cluster
from tests.e2e.hosts import wait_for
from tests.e2e.prometheus import Shard, dns_name, replica_name, start_shard

pytestmark = pytest.mark.e2e

NODE_SHARD = "nodes-0"
SCRAPE_TIMEOUT = 120  # the rendered scrape and evaluation interval is 30 s; two rounds, and discovery
# Control-plane jobs whose targets the box does not run, and why (docs/cluster-in-a-box.md). Their
# targets must still be discovered: the job is configured and its discovery works.
NOT_RUN = {
    rules.JOB_ETCD_BACKUP: "the etcd member tool's metrics list Azure Blob storage",
    rules.JOB_AUTOSCALER: "cluster-autoscaler is not served by the Go module proxy",
    rules.JOB_KUBE_STATE_METRICS: "kube-state-metrics is not built in the box",
    rules.JOB_COREDNS: "CoreDNS's pods are simulated (no container runs)",
    rules.JOB_ALERTMANAGER: "Alertmanager is not run in the box",
}


@pytest.fixture(scope="module")
def shards(dev: Cluster) -> dict[str, Shard]:
    """Replica 0 of the control-plane shard, and a replica of the node shard on another node (a
    pod's address is its node's here, so two shards on one node would share a port)."""

    def pod(shard: str, replica: int) -> dict:
        return pod_processes.bound_pod(dev, monitoring.NAMESPACE, replica_name(shard, replica))

    control_node = pod(monitoring.CONTROL_PLANE_SHARD, 0)["spec"]["nodeName"]
    node_replica = next(r for r in range(2) if pod(NODE_SHARD, r)["spec"]["nodeName"] != control_node)
    running = {monitoring.CONTROL_PLANE_SHARD: 0, NODE_SHARD: node_replica}
    names = {dns_name(shard, replica): pod(shard, replica)["status"]["podIP"] for shard, replica in running.items()}
    return {shard: start_shard(dev, shard, replica, names) for shard, replica in running.items()}


def _by_job(shard: Shard) -> dict[str, list[dict]]:
    jobs: dict[str, list[dict]] = {}
    for target in shard.targets():
        jobs.setdefault(target["labels"]["job"], []).append(target)
    return jobs


def _describe(jobs: dict[str, list[dict]]) -> str:
    return "\n".join(
        f"{job}: {t['scrapeUrl']} {t['health']} {t.get('lastError', '')}" for job, ts in jobs.items() for t in ts
    )


def _wait_until_up(shard: Shard, configured: set[str], must_be_up) -> dict[str, list[dict]]:
    """Waits until every configured job has targets and every target ``must_be_up(job, target)`` names
    is up; fails listing every target."""

    def settled() -> dict[str, list[dict]] | None:
        jobs = _by_job(shard)
        wanted = [t for job, ts in jobs.items() for t in ts if must_be_up(job, t)]
        return jobs if set(jobs) == configured and all(t["health"] == "up" for t in wanted) else None

    try:
        return wait_for(f"the {shard.name} shard's targets to be up", settled, timeout=SCRAPE_TIMEOUT, interval=5)
    except TimeoutError:
        pytest.fail(f"{shard.pod}'s targets:\n" + _describe(_by_job(shard)))


def test_every_control_plane_target_the_box_runs_is_up(dev: Cluster, shards: dict[str, Shard]):
    shard = shards[monitoring.CONTROL_PLANE_SHARD]
    config = yaml.safe_load((dev.workdir / "prometheus" / shard.pod / "config" / "prometheus.yml").read_text())
    configured = {job["job_name"] for job in config["scrape_configs"]}
    assert set(NOT_RUN) <= configured, "a job the box is said not to run is no longer configured"
    run = {s.dns_name for s in shards.values()}  # the replicas the box runs
    replicas_jobs = (rules.JOB_PROMETHEUS, rules.JOB_PROMETHEUS_PEERS)

    def must_be_up(job: str, target: dict) -> bool:
        if job in replicas_jobs:
            return target["labels"]["instance"].rsplit(":", 1)[0] in run
        return job not in NOT_RUN

    jobs = _wait_until_up(shard, configured, must_be_up)
    apiservers = [m.ip for m, _, _ in dev.control_plane]
    assert {t["scrapeUrl"] for t in jobs[rules.JOB_APISERVER]} == {f"https://{ip}:6443/metrics" for ip in apiservers}
    for job in (rules.JOB_SCHEDULER, rules.JOB_CONTROLLER_MANAGER):
        assert len(jobs[job]) == len(apiservers), _describe({job: jobs[job]})
    # The main and events etcd jobs: each exactly one cluster's members.
    scraped = sorted(sorted(t["labels"]["instance"] for t in jobs[job]) for job in rules.JOB_ETCD.values())
    members = sorted(sorted(f"{m.ip}:{ETCD_METRICS_PORT}" for m, _, _ in dev.etcd[role]) for role in (MAIN, EVENTS))
    assert scraped == members, _describe({job: jobs[job] for job in rules.JOB_ETCD.values()})
    # Each shard's own replica, and the node shard's replica through the peers job.
    for job in replicas_jobs:
        assert any(must_be_up(job, t) for t in jobs[job]), _describe({job: jobs[job]})


def test_every_rule_group_of_the_control_plane_shard_evaluates_without_error(shards: dict[str, Shard]):
    shard = shards[monitoring.CONTROL_PLANE_SHARD]
    rules_dir = shard.cluster.workdir / "prometheus" / shard.pod / "rules"
    loaded = {
        group["name"]: len(group["rules"])
        for path in sorted(rules_dir.glob("*.yaml"))
        for group in yaml.safe_load(path.read_text())["groups"]
    }
    never = "0001-01-01T00:00:00Z"

    def evaluated() -> list[dict] | None:
        groups = shard.rule_groups()
        done = all(g["lastEvaluation"] != never for g in groups) and len(groups) == len(loaded)
        return groups if done else None

    groups = wait_for("every rule group to be evaluated once", evaluated, timeout=SCRAPE_TIMEOUT, interval=5)
    assert {g["name"]: len(g["rules"]) for g in groups} == loaded
    failing = [
        f"{g['name']}/{r['name']}: {r['health']} {r.get('lastError', '')}"
        for g in groups
        for r in g["rules"]
        if r["health"] != "ok" or r.get("lastError")
    ]
    assert not failing, "\n".join(failing)


def test_the_node_shard_discovers_every_node_for_the_kubelet_with_its_labels(dev: Cluster, shards: dict[str, Shard]):
    shard = shards[NODE_SHARD]
    nodes = {
        n["metadata"]["name"]: next(a["address"] for a in n["status"]["addresses"] if a["type"] == "InternalIP")
        for n in dev.get_json("nodes")["items"]
    }

    def discovered() -> dict[str, dict] | None:
        targets = {t["labels"]["node"]: t for t in _by_job(shard).get(rules.JOB_KUBELET, [])}
        return targets if set(targets) == set(nodes) else None

    targets = wait_for("the node shard to discover every node", discovered, timeout=SCRAPE_TIMEOUT, interval=5)
    for name, target in targets.items():
        assert target["scrapeUrl"] == f"https://{nodes[name]}:{KUBELET_PORT}/metrics", target
