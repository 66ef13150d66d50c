"""Behaviour 8: the control-plane Prometheus shard scrapes the control plane with its rendered config,
and a node shard the nodes; Prometheus and Alertmanager answer only the stack's own credential, and
alerts still reach Alertmanager with it.

The dev plan booted (its own cluster); one replica of the control-plane shard and one of the
node shard run as tests/e2e/prometheus.py describes, and Alertmanager's replica 0 as
tests/e2e/alertmanager.py does. Every assertion reads the running Prometheus's or Alertmanager's
own API: active targets, rule groups, alerts and silences.
"""

from __future__ import annotations

import datetime
import json

import pytest
import yaml

from infra.addons import monitoring
from infra.addons.monitoring import credential, rules
from infra.addons.monitoring.shards import KUBELET_PORT
from infra.control_plane import token_minting
from infra.etcd.spec import EVENTS, MAIN
from infra.etcd.spec import METRICS_PORT as ETCD_METRICS_PORT
from tests.e2e import pod_processes
from tests.e2e.alertmanager import Replica, start_replica
from tests.e2e.alertmanager import dns_name as alertmanager_dns_name
from tests.e2e.alertmanager import pod_name as alertmanager_pod
from tests.e2e.cluster import Cluster
from tests.e2e.hosts import wait_for
from tests.e2e.prometheus import Shard, curl_credential, dns_name, replica_name, start_shard, status

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
}
# A rule the test adds beside the rendered ones on the control-plane replica: an alert that fires at its
# first evaluation, so Prometheus sends one to Alertmanager at once (the rendered alerts wait minutes).
PROBE_ALERT = "BoxAlertReachesAlertmanager"
PROBE_RULES = {
    "box-probe.yaml": yaml.safe_dump(
        {"groups": [{"name": "box-probe", "rules": [{"alert": PROBE_ALERT, "expr": "vector(1)"}]}]}
    )
}
ALERTMANAGER_REPLICA = 0  # the other replica does not run: its name resolves nowhere


def _pod(dev: Cluster, name: str) -> dict:
    return pod_processes.bound_pod(dev, monitoring.NAMESPACE, name)


@pytest.fixture(scope="module")
def running(dev: Cluster) -> dict[str, int]:
    """``{shard: replica}``: replica 0 of the control-plane shard, and a replica of the node shard on another
    node (a pod's address is its node's here, so two shards on one node would share a port)."""
    control_node = _pod(dev, replica_name(monitoring.CONTROL_PLANE_SHARD, 0))["spec"]["nodeName"]
    node_replica = next(
        r for r in range(2) if _pod(dev, replica_name(NODE_SHARD, r))["spec"]["nodeName"] != control_node
    )
    return {monitoring.CONTROL_PLANE_SHARD: 0, NODE_SHARD: node_replica}


@pytest.fixture(scope="module")
def names(dev: Cluster, running: dict[str, int]) -> dict[str, str]:
    """The hosts file of every process the module runs: the shards' replicas and Alertmanager's replica 0
    (its ports differ from Prometheus's, so it may share a node with one)."""
    found = {dns_name(shard, r): _pod(dev, replica_name(shard, r))["status"]["podIP"] for shard, r in running.items()}
    found[alertmanager_dns_name(ALERTMANAGER_REPLICA)] = _pod(dev, alertmanager_pod(ALERTMANAGER_REPLICA))["status"][
        "podIP"
    ]
    return found


@pytest.fixture(scope="module")
def alertmanager(dev: Cluster, names: dict[str, str]) -> Replica:
    return start_replica(dev, ALERTMANAGER_REPLICA, names)


@pytest.fixture(scope="module")
def shards(dev: Cluster, running: dict[str, int], names: dict[str, str], alertmanager: Replica) -> dict[str, Shard]:
    """The control-plane replica carries the probe alert (``PROBE_RULES``)."""
    return {
        shard: start_shard(dev, shard, r, names, PROBE_RULES if shard == monitoring.CONTROL_PLANE_SHARD else None)
        for shard, r in running.items()
    }


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
    # The replicas the box runs; their jobs authenticate (credential.py), so each up target proves the credential.
    run = {s.dns_name for s in shards.values()} | {alertmanager_dns_name(ALERTMANAGER_REPLICA)}
    replicas_jobs = (rules.JOB_PROMETHEUS, rules.JOB_PROMETHEUS_PEERS, rules.JOB_ALERTMANAGER)

    def must_be_up(job: str, target: dict) -> bool:
        if job in replicas_jobs:
            return target["labels"]["instance"].rsplit(":", 1)[0] in run
        return job not in NOT_RUN

    jobs = _wait_until_up(shard, configured, must_be_up)
    apiservers = [m.ip for m, _, _ in dev.control_plane]
    assert {t["scrapeUrl"] for t in jobs[rules.JOB_APISERVER]} == {f"https://{ip}:6443/metrics" for ip in apiservers}
    for job in (rules.JOB_SCHEDULER, rules.JOB_CONTROLLER_MANAGER, rules.JOB_TOKEN_MINTER):
        assert len(jobs[job]) == len(apiservers), _describe({job: jobs[job]})
    # What the token-minter alerts read: the mint time of the token in Key Vault, as the minters' Lease records it.
    lease = dev.get_json("lease", "-n", token_minting.BOOTSTRAP_TOKEN_NAMESPACE, token_minting.LEASE)
    annotation = lease["metadata"]["annotations"][token_minting.MINTED_ANNOTATION]
    minted = datetime.datetime.strptime(annotation, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC).timestamp()
    wait_for(
        f"every minter's {token_minting.MINTED_METRIC} to be the Lease's {annotation}",
        lambda: [float(s["value"][1]) for s in shard.query(token_minting.MINTED_METRIC)] == [minted] * len(apiservers),
        timeout=SCRAPE_TIMEOUT,
        interval=5,
        on_timeout=lambda: json.dumps(shard.query(token_minting.MINTED_METRIC)),
    )
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


def test_prometheus_and_alertmanager_answer_only_the_stacks_credential(
    dev: Cluster, shards: dict[str, Shard], alertmanager: Replica
):
    """Asked from the pod's node, where port-forward enters. Before the stack had a credential, both answered
    anyone (200), and anyone could create a silence."""
    shard = shards[monitoring.CONTROL_PLANE_SHARD]
    wrong = ["--user", f"{credential.USER}:not-the-password"]
    query = shard.url + "/api/v1/query?query=up"
    assert [status(dev, shard.node, query, *c) for c in ([], wrong, curl_credential(dev))] == [401, 401, 200]
    silence = json.dumps(
        {
            "matchers": [{"name": "alertname", "value": PROBE_ALERT, "isRegex": False, "isEqual": True}],
            "startsAt": "2020-01-01T00:00:00Z",
            "endsAt": "2999-01-01T00:00:00Z",
            "createdBy": "box",
            "comment": "refused without the credential",
        }
    )
    create = ["-X", "POST", "-H", "Content-Type: application/json", "--data", silence]
    silences = alertmanager.url + "/api/v2/silences"
    assert status(dev, alertmanager.node, silences, *create) == 401
    assert status(dev, alertmanager.node, silences, *create, *wrong) == 401
    assert status(dev, alertmanager.node, silences) == 401
    assert alertmanager.api("/silences") == [], "a silence was created without the credential"
    assert status(dev, alertmanager.node, silences, *create, *curl_credential(dev)) == 200
    (created,) = alertmanager.api("/silences")
    assert created["createdBy"] == "box"


def test_alerts_reach_alertmanager_with_the_credential(dev: Cluster, shards: dict[str, Shard], alertmanager: Replica):
    """The control-plane replica's probe alert arrives, labelled by its shard: Prometheus's alerting client
    presents the credential (without it, Alertmanager answers 401 and the alert is dropped)."""

    def arrived() -> list[dict] | None:
        alerts = [a for a in alertmanager.api("/alerts") if a["labels"].get("alertname") == PROBE_ALERT]
        return alerts or None

    try:
        (alert,) = wait_for("the probe alert to reach Alertmanager", arrived, timeout=SCRAPE_TIMEOUT, interval=5)
    except TimeoutError:
        shard = shards[monitoring.CONTROL_PLANE_SHARD]
        pytest.fail(f"no alert arrived; Prometheus's alertmanagers: {shard.api('/api/v1/alertmanagers')}")
    assert alert["labels"]["shard"] == monitoring.CONTROL_PLANE_SHARD
