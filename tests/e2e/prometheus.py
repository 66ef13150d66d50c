"""A Prometheus shard of the booted cluster, run with what its pod would receive.

Prometheus (built from its Go module by scripts/build-monitoring-tools.sh, the release the
cluster runs) runs as a process in the network namespace of the node its pod is bound to (the
box reports that node's address as the pod's). Everything it reads comes from the running
cluster, as the pod's mounts would: the shard's StatefulSet container arguments verbatim, its
config and rules ConfigMaps at ``/etc/prometheus`` and ``/etc/prometheus/rules``, the monitoring
credential Secret at its mount path (its values the box's, docs/cluster-in-a-box.md), and a
service-account token bound to its pod with the cluster CA at the service-account path.

Substituted (docs/cluster-in-a-box.md says why): no container runs it (the Prometheus image is
not built in the box); the in-cluster API address (``KUBERNETES_SERVICE_HOST``) is the
apiservers' load balancer; and cluster DNS for the scrape targets' names is a hosts file holding
the replicas the box runs, at their pods' addresses (a replica the box does not run has no name).

On a real node (the data-plane box, tests/e2e/runtime.py) the pod is real: kubelet started its
sandbox, which holds the pod's address (its container waits for an image the box cannot pull). The
process then runs in that sandbox's network namespace, and reaches the API at the ``kubernetes``
Service's address through the node's kube-proxy, as the container would. The address is read from
the sandbox, not from the pod's status: kubelet reports it only once its first sync of the pod ends,
and that sync first runs the rendered image credential provider for the pod's images (kubelet 1.33
does so even for an image already present), which gets no token in the box and is killed at kubelet's
one-minute exec deadline (docs/cluster-in-a-box.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from infra.addons import monitoring
from infra.addons.monitoring import credential
from infra.addons.monitoring.shards import ACCOUNT_DIR
from tests.e2e import pod_processes
from tests.e2e.cluster import Cluster, Node
from tests.e2e.hosts import Process, wait_for
from tests.helpers import monitoring_tool

READY_TIMEOUT = 60


@dataclass
class Shard:
    """One running replica of a shard, and how to ask its HTTP API."""

    cluster: Cluster
    name: str
    replica: int
    pod: str
    node: Node
    process: Process
    address: str  # the pod's

    @property
    def dns_name(self) -> str:
        return dns_name(self.name, self.replica)

    @property
    def url(self) -> str:
        return f"http://{self.address}:{monitoring.PORT}"

    def api(self, path: str) -> Any:
        """``data`` of a GET on the API, asked from the pod's node: people reach Prometheus through
        ``kubectl port-forward`` (which enters the pod from its node), and a system node drops the monitoring
        ports from everywhere but the system pools' subnets (infra/node/cni.py), the operator's host included."""
        result = self.cluster.network.run(
            self.node.host,
            ["curl", "-sf", "--max-time", "10", *curl_credential(self.cluster), self.url + path],
            timeout=20,
        )
        answer = json.loads(result.stdout)
        assert answer["status"] == "success", answer
        return answer["data"]

    def targets(self) -> list[dict[str, Any]]:
        return self.api("/api/v1/targets?state=active")["activeTargets"]

    def rule_groups(self) -> list[dict[str, Any]]:
        return self.api("/api/v1/rules")["groups"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        return self.api(f"/api/v1/query?query={quote(promql)}")["result"]


def curl_credential(cluster: Cluster) -> list[str]:
    """curl's arguments for the monitoring stack's user and the box's password (credential.py)."""
    return ["--user", f"{credential.USER}:{cluster.pki.monitoring_password}"]


def wait_ready(cluster: Cluster, node: Node, url: str, process: Process, name: str) -> None:
    """Waits until ``url``'s ``/-/ready`` answers the credential from ``node`` (Prometheus's and Alertmanager's
    readiness path); on timeout the failure shows the end of ``process``'s output."""
    wait_for(
        f"{name} to answer /-/ready",
        lambda: (
            cluster.network.run(
                node.host, ["curl", "-sf", "--max-time", "5", *curl_credential(cluster), url + "/-/ready"], check=False
            ).returncode
            == 0
        ),
        timeout=READY_TIMEOUT,
        on_timeout=lambda: process.output()[-3000:],
    )


def status(cluster: Cluster, node: Node, url: str, *curl: str) -> int:
    """The HTTP status of a request from ``node`` (``curl``: more of curl's arguments, a credential or a method)."""
    result = cluster.network.run(
        node.host, ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", *curl, url], timeout=20
    )
    return int(result.stdout)


def replica_name(shard: str, replica: int) -> str:
    return f"{monitoring.shard_workload(shard)}-{replica}"


def dns_name(shard: str, replica: int) -> str:
    """The replica's name as the rendered scrape configs spell it (without the port)."""
    return monitoring.replica_addresses(shard, replica + 1)[replica].rsplit(":", 1)[0]


def start_shard(
    cluster: Cluster, shard: str, replica: int, names: dict[str, str], extra_rules: dict[str, str] | None = None
) -> Shard:
    """Runs ``replica`` of ``shard`` on its pod's node; ``names``: the hosts file (``{name: address}``);
    ``extra_rules``: rule files a test adds beside the rendered ones (``{file name: text}``)."""
    workload = monitoring.shard_workload(shard)
    pod = pod_processes.bound_pod(cluster, monitoring.NAMESPACE, replica_name(shard, replica))
    node = pod_processes.pod_node(cluster, pod)
    real = any(n.machine.name == node.machine.name for n in cluster.real_nodes)
    if real:
        netns, address = wait_for(
            f"{pod['metadata']['name']}'s sandbox to hold its address",
            lambda: _sandbox_address(cluster, node, pod),
            timeout=READY_TIMEOUT,
            on_timeout=lambda: (
                cluster.kubectl(
                    "describe", "pod", "-n", monitoring.NAMESPACE, pod["metadata"]["name"], check=False
                ).stdout
            ),
        )
    else:
        address = pod["status"].get("podIP")
        assert address == node.machine.ip, "the box reports a pod's address as its node's"
    spec = pod_processes.container(pod, monitoring.NAME)
    root = cluster.workdir / "prometheus" / pod["metadata"]["name"]
    (root / "data").mkdir(parents=True, exist_ok=True)
    hosts = root / "hosts"
    hosts.write_text("127.0.0.1 localhost\n" + "".join(f"{ip} {name}\n" for name, ip in names.items()))
    rules_dir = pod_processes.write_config_map(cluster, f"{workload}-rules", monitoring.NAMESPACE, root / "rules")
    for file, text in (extra_rules or {}).items():
        (rules_dir / file).write_text(text)
    mounts = {
        pod_processes.write_config_map(cluster, workload, monitoring.NAMESPACE, root / "config"): monitoring.CONFIG_DIR,
        rules_dir: monitoring.RULES_DIR,
        root / "data": monitoring.DATA_DIR,
        pod_processes.write_secret(
            cluster, credential.SECRET, monitoring.NAMESPACE, root / "access"
        ): credential.MOUNT_DIR,
        pod_processes.write_service_account(cluster, pod, root / "account"): ACCOUNT_DIR,
        hosts: "/etc/hosts",
    }
    argv = [monitoring_tool("prometheus"), *spec["args"]]
    if real:
        argv = ["nsenter", f"--net={netns}", *argv]
        api = cluster.get_json("service", "-n", "default", "kubernetes")["spec"]
        host, port = api["clusterIP"], str(api["ports"][0]["port"])
    else:
        host, port = cluster.apiserver_url.removeprefix("https://").rsplit(":", 1)
    process = pod_processes.start(
        cluster,
        node,
        f"prometheus-{shard}-{replica}",
        argv,
        mounts,
        {**pod_processes.environment(pod, spec), "KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port},
    )
    running = Shard(cluster, shard, replica, pod["metadata"]["name"], node, process, address)
    wait_ready(cluster, node, running.url, process, running.pod)
    return running


def _sandbox_address(cluster: Cluster, node: Node, pod: dict[str, Any]) -> tuple[str, str] | None:
    """``(network namespace, address)`` of the pod's sandbox once the CNI plugins have given it its address."""
    netns = pod_processes.sandbox_network(cluster, node, pod)
    shown = cluster.network.run(node.host, ["nsenter", f"--net={netns}", "ip", "-4", "-o", "addr", "show", "eth0"])
    addresses = [word.split("/")[0] for line in shown.stdout.splitlines() for word in line.split()[3:4]]
    return (netns, addresses[0]) if addresses else None
