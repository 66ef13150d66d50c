"""An Alertmanager replica of the booted cluster, run with what its pod would receive.

As tests/e2e/prometheus.py runs a Prometheus shard: Alertmanager (built from its Go module by
scripts/build-monitoring-tools.sh, the release the cluster runs) runs as a process in the network
namespace of the node its pod is bound to, with the StatefulSet container's arguments verbatim, its
ConfigMap at its config path, the monitoring credential Secret and the gossip mesh's certificate Secret at
their mount paths, and a hosts file for
the replicas' names. The receivers' Secret is optional and the box creates none, as a cluster whose
operator has not copied it yet. Substituted: no container runs it (docs/cluster-in-a-box.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from infra.addons import monitoring
from infra.addons.monitoring import alertmanager, credential
from tests.e2e import pod_processes
from tests.e2e.cluster import Cluster, Node
from tests.e2e.hosts import Process
from tests.e2e.prometheus import curl_credential, wait_ready
from tests.helpers import monitoring_tool

DATA_DIR = "/alertmanager"  # the StatefulSet's --storage.path, an emptyDir


@dataclass
class Replica:
    cluster: Cluster
    pod: dict[str, Any]
    node: Node
    process: Process
    address: str

    @property
    def url(self) -> str:
        return f"http://{self.address}:{alertmanager.PORT}"

    def api(self, path: str) -> Any:
        """A GET on the v2 API with the credential, asked from the pod's node (as tests/e2e/prometheus.py's)."""
        result = self.cluster.network.run(
            self.node.host,
            ["curl", "-sf", "--max-time", "10", *curl_credential(self.cluster), f"{self.url}/api/v2{path}"],
            timeout=20,
        )
        return json.loads(result.stdout)


def pod_name(replica: int) -> str:
    return f"{alertmanager.NAME}-{replica}"


def dns_name(replica: int) -> str:
    """The replica's name as the rendered configs spell it (without the port)."""
    return alertmanager.api_addresses(monitoring.NAMESPACE, replica + 1)[replica].rsplit(":", 1)[0]


def start_replica(cluster: Cluster, replica: int, names: dict[str, str]) -> Replica:
    """Runs ``replica`` on its pod's node (a node simulated by nodesim: the pod's address is the node's);
    ``names``: the hosts file (``{name: address}``)."""
    pod = pod_processes.bound_pod(cluster, monitoring.NAMESPACE, pod_name(replica))
    node = pod_processes.pod_node(cluster, pod)
    address = pod["status"].get("podIP")
    assert address == node.machine.ip, "the box reports a pod's address as its node's"
    spec = pod_processes.container(pod, alertmanager.NAME)
    root = cluster.workdir / "alertmanager" / pod["metadata"]["name"]
    (root / "data").mkdir(parents=True, exist_ok=True)
    hosts = root / "hosts"
    hosts.write_text("127.0.0.1 localhost\n" + "".join(f"{ip} {name}\n" for name, ip in names.items()))
    mounts = {
        pod_processes.write_config_map(
            cluster, alertmanager.NAME, monitoring.NAMESPACE, root / "config"
        ): alertmanager.CONFIG_DIR,
        pod_processes.write_secret(
            cluster, credential.SECRET, monitoring.NAMESPACE, root / "access"
        ): credential.MOUNT_DIR,
        pod_processes.write_secret(
            cluster, alertmanager.CLUSTER_TLS_SECRET, monitoring.NAMESPACE, root / "cluster-tls"
        ): alertmanager.CLUSTER_TLS_DIR,
        root / "data": DATA_DIR,
        hosts: "/etc/hosts",
    }
    assert f"--storage.path={DATA_DIR}" in spec["args"]
    process = pod_processes.start(
        cluster,
        node,
        pod["metadata"]["name"],
        [monitoring_tool("alertmanager"), *spec["args"]],
        mounts,
        pod_processes.environment(pod, spec),
    )
    running = Replica(cluster, pod, node, process, address)
    wait_ready(cluster, node, running.url, process, pod_name(replica))
    return running
