"""Behaviour 8, second half: a node Prometheus shard scrapes the real kubelets' metrics.

The data-plane box (real kubelets, tests/e2e/runtime.py); one replica of the node shard runs with its
rendered config in its real pod's network namespace (tests/e2e/prometheus.py). Each real kubelet
answers the shard's scrape over HTTPS only with the pod's service-account token, which the kubelet
has the apiserver check (webhook authentication and authorization, ``nodes/metrics``). The kubelet
jobs the shard runs are checked to authenticate exactly as prod's rendered node shard does, so the
box proves prod's setting: without it every kubelet answers 401 and no target is up. The shard verifies each
kubelet's serving certificate with the cluster CA: every real kubelet asked for it (``serverTLSBootstrap``) and
the approver on the apiserver VMs (``machine/control_plane/csr_approver.py``) approved it for the addresses Azure
gives the VM the Node's providerID names (each real kubelet wrote it with ``machine/node/provider_id.py`` from the
IMDS stand-in, which answers as Resource Manager too), and no other: a node's request for another node's address is
denied, even while its Node reports that address.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
import yaml

from infra.addons import monitoring
from infra.addons.monitoring import rules
from infra.addons.monitoring.shards import KUBELET_PORT
from infra.control_plane.csr_approval import KUBELET_SERVING_SIGNER
from infra.control_plane.csr_approval import UNIT as CSR_APPROVER_UNIT
from infra.facts.labels import ROLE_LABEL, ROLE_SYSTEM
from tests.e2e.cluster import Cluster, boot, plan_stack
from tests.e2e.hosts import wait_for
from tests.e2e.pki import node_csr
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


SERVING_TIMEOUT = 120  # a kubelet asks once its Node has registered; the approver relists every few seconds


def _serving_requests(box: Cluster) -> list[dict]:
    return [c for c in box.get_json("csr")["items"] if c["spec"]["signerName"] == KUBELET_SERVING_SIGNER]


def _condition(csr: dict) -> dict | None:
    return next(iter(csr.get("status", {}).get("conditions") or []), None)


def test_every_real_kubelet_serves_a_certificate_the_cluster_ca_verifies_for_its_address(box: Cluster):
    """Its serving CSR was approved by the approver for the Node's own addresses and signed by the
    controller-manager; the kubelet's port presents that certificate, which curl verifies against the cluster
    CA for the node's IP (exit 0; 60 on the old self-signed certificate). Unauthenticated, the kubelet answers
    401."""
    for node in box.real_nodes:
        user = f"system:node:{node.machine.name}"

        def approved(user=user) -> dict | None:
            mine = [c for c in _serving_requests(box) if c["spec"]["username"] == user]
            return next(
                (c for c in mine if (_condition(c) or {}).get("type") == "Approved" and c["status"].get("certificate")),
                None,
            )

        csr = wait_for(
            f"{user}'s serving certificate to be approved and signed", approved, timeout=SERVING_TIMEOUT, interval=2
        )
        assert _condition(csr)["reason"] == "SuperclusterNodeAddresses", csr["status"]

        def verified(ip=node.machine.ip) -> bool:
            argv = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10"]
            argv += ["--cacert", str(box.workdir / "ca.crt"), f"https://{ip}:{KUBELET_PORT}/healthz"]
            result = box.network.run(box.admin, argv, check=False, timeout=20)
            return result.returncode == 0 and result.stdout == "401"

        wait_for(
            f"{node.machine.name}'s kubelet to serve a certificate the cluster CA verifies",
            verified,
            timeout=SERVING_TIMEOUT,
            interval=2,
        )


def _node_kubeconfig(box: Cluster, node) -> Path:
    """A kubeconfig with the node's own client certificate (kubelet's current one, a symlink on the machine)."""
    link = node.host.root / "var/lib/kubelet/pki/kubelet-client-current.pem"
    pem = node.host.root / os.readlink(link).lstrip("/")
    path = box.workdir / f"{node.machine.name}-as-node.conf"
    server = {"server": box.apiserver_url, "certificate-authority": str(box.workdir / "ca.crt")}
    user = {"client-certificate": str(pem), "client-key": str(pem)}
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "box", "cluster": server}],
                "users": [{"name": "node", "user": user}],
                "contexts": [{"name": "box", "context": {"cluster": "box", "user": "node"}}],
                "current-context": "box",
            }
        )
    )
    return path


def _serving_request(box: Cluster, kubeconfig: Path, node: str, ips: list[str], usages: list[str]) -> str:
    name = f"crafted-{uuid.uuid4().hex[:8]}"
    _, csr = node_csr(node, name, KUBELET_SERVING_SIGNER, usages, tuple(ips))
    box.kubectl("create", "-f", "-", input=json.dumps(csr), kubeconfig=kubeconfig)
    return name


def _report_addresses(box: Cluster, node, addresses: list[dict[str, str]]) -> None:
    """A merge patch of the Node's status addresses, as root on the node can send it with the node's own
    certificate (kubelet sets them again at its next status update)."""
    pem = node.host.root / os.readlink(node.host.root / "var/lib/kubelet/pki/kubelet-client-current.pem").lstrip("/")
    argv = ["curl", "-sf", "--max-time", "20", "-X", "PATCH", "--cacert", str(box.workdir / "ca.crt")]
    argv += ["--cert", str(pem), "--key", str(pem), "-H", "Content-Type: application/merge-patch+json"]
    argv += ["--data", json.dumps({"status": {"addresses": addresses}}), "-o", "/dev/null"]
    box.network.run(box.admin, [*argv, f"{box.apiserver_url}/api/v1/nodes/{node.machine.name}/status"], timeout=40)


def _decision(box: Cluster, name: str) -> dict:
    return wait_for(
        f"a decision on {name}", lambda: _condition(box.get_json("csr", name)), timeout=SERVING_TIMEOUT, interval=2
    )


def test_a_node_gets_no_serving_certificate_for_another_nodes_address(box: Cluster):
    """Root on a real node, with the node's own certificate, reports another node's IP in its Node's status and
    asks for a serving certificate naming it (to answer the apiserver and Prometheus as that node): denied, the
    address named, because the approver takes the addresses from Azure's NICs of the VM the Node's providerID names
    (the IMDS stand-in answers as Resource Manager), not from the Node; the old approver took the Node's word. A
    request naming one of its pods' addresses (a secondary IP configuration of its NIC) is denied too, and one
    asking for client auth as well."""
    node = next(n for n in box.real_nodes if n.machine.pod_ips)  # a scale set's instance: its NIC holds pods'
    other = next(n for n in box.real_nodes if n is not node)
    kubeconfig = _node_kubeconfig(box, node)
    serving = ["digital signature", "key encipherment", "server auth"]
    own = [{"type": "InternalIP", "address": node.machine.ip}, {"type": "Hostname", "address": node.machine.name}]
    _report_addresses(box, node, [*own, {"type": "InternalIP", "address": other.machine.ip}])
    crafted = _serving_request(box, kubeconfig, node.machine.name, [node.machine.ip, other.machine.ip], serving)
    pod = _serving_request(box, kubeconfig, node.machine.name, [node.machine.ip, node.machine.pod_ips[0]], serving)
    overreaching = _serving_request(box, kubeconfig, node.machine.name, [node.machine.ip], [*serving, "client auth"])
    for name, named in ((crafted, other.machine.ip), (pod, node.machine.pod_ips[0]), (overreaching, "client auth")):
        condition = _decision(box, name)
        assert condition["type"] == "Denied" and named in condition["message"], (name, condition)
        assert not box.get_json("csr", name).get("status", {}).get("certificate")
    approvers = [processes[CSR_APPROVER_UNIT] for _, _, processes in box.control_plane]
    assert any(
        f"{crafted} (system:node:{node.machine.name}) denied: {other.machine.ip}" in a.output() for a in approvers
    )
