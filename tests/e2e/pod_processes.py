"""A bound pod's container run as a process on its node, with what the pod would receive.

For add-ons whose image the box does not build (Prometheus, the GPU health check): the process runs
in the node's network and mount namespaces with the container's command or arguments verbatim,
its environment resolved as the kubelet would (``fieldRef`` included), and the pod's volumes
bound at their mount paths (ConfigMaps and Secrets written out from the running cluster, a
service-account token bound to the pod). docs/cluster-in-a-box.md states what this does not do (no image, no
cgroup limits, no security context).
"""

from __future__ import annotations

import base64
import json
import shlex
from pathlib import Path
from typing import Any

from infra.node import install
from tests.e2e.cluster import Cluster, Node
from tests.e2e.hosts import Process, wait_for

# What a projected service-account volume holds besides the token: the cluster CA, the namespace.
CA_FILE = "ca.crt"
BIND_TIMEOUT = 60


def bound_pod(
    cluster: Cluster, namespace: str, name: str | None = None, selector: str | None = None, node: str | None = None
) -> dict[str, Any]:
    """The pod ``name`` (or the one of ``selector`` on ``node``) once the scheduler has bound it:
    right after a boot the scheduler may not have reached it yet."""

    def bound() -> dict[str, Any] | None:
        if name is not None:
            pods = [cluster.get_json("pod", name, "-n", namespace)]
        else:
            pods = cluster.get_json("pods", "-n", namespace, "-l", selector)["items"]
        placed = [p for p in pods if p["spec"].get("nodeName") and node in (None, p["spec"]["nodeName"])]
        return placed[0] if placed else None

    return wait_for(f"{name or selector} in {namespace} to be bound", bound, timeout=BIND_TIMEOUT)


def pod_node(cluster: Cluster, pod: dict[str, Any]) -> Node:
    (node,) = [n for n in cluster.nodes if n.machine.name == pod["spec"]["nodeName"]]
    return node


def sandbox_network(cluster: Cluster, node: Node, pod: dict[str, Any]) -> str:
    """The network namespace of ``pod``'s sandbox on a real node (its path on the node), asked of containerd."""
    ctr = [f"{install.BIN}/ctr", "--namespace", "k8s.io", "containers"]
    labels = f'labels."io.cri-containerd.kind"==sandbox,labels."io.kubernetes.pod.uid"=={pod["metadata"]["uid"]}'
    (sandbox,) = cluster.network.run(node.host, [*ctr, "ls", "--quiet", labels]).stdout.split()
    info = json.loads(cluster.network.run(node.host, [*ctr, "info", sandbox]).stdout)
    (path,) = [n["path"] for n in info["Spec"]["linux"]["namespaces"] if n["type"] == "network"]
    return path


def container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [c for c in pod["spec"]["containers"] if c["name"] == name]
    return found


def environment(pod: dict[str, Any], spec: dict[str, Any]) -> dict[str, str]:
    """The container's environment as the kubelet sets it (values, and the pod fields the box fills)."""
    fields = {"spec.nodeName": pod["spec"]["nodeName"], "metadata.name": pod["metadata"]["name"]}
    env = {}
    for entry in spec.get("env", []):
        if "value" in entry:
            env[entry["name"]] = entry["value"]
        else:
            env[entry["name"]] = fields[entry["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def write_config_map(cluster: Cluster, name: str, namespace: str, folder: Path) -> Path:
    """A ConfigMap volume: each key of the running ConfigMap as a file in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for key, text in cluster.get_json("configmap", name, "-n", namespace)["data"].items():
        (folder / key).write_text(text)
    return folder


def write_secret(cluster: Cluster, name: str, namespace: str, folder: Path) -> Path:
    """A Secret volume: each key of the running Secret, decoded, as a file in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for key, encoded in cluster.get_json("secret", name, "-n", namespace)["data"].items():
        (folder / key).write_bytes(base64.b64decode(encoded))
    return folder


def write_service_account(cluster: Cluster, pod: dict[str, Any], folder: Path) -> Path:
    """A service-account volume: a token bound to ``pod`` (so it carries the pod's node), the cluster
    CA and the namespace."""
    folder.mkdir(parents=True, exist_ok=True)
    metadata = pod["metadata"]
    token = cluster.kubectl(
        "create",
        "token",
        pod["spec"]["serviceAccountName"],
        "-n",
        metadata["namespace"],
        "--bound-object-kind=Pod",
        f"--bound-object-name={metadata['name']}",
        f"--bound-object-uid={metadata['uid']}",
    ).stdout.strip()
    (folder / "token").write_text(token)
    (folder / CA_FILE).write_text(cluster.pki.cluster_ca.cert_pem)
    (folder / "namespace").write_text(metadata["namespace"])
    return folder


def start(
    cluster: Cluster,
    node: Node,
    name: str,
    argv: list[str],
    mounts: dict[Path, str],
    env: dict[str, str],
) -> Process:
    """Runs ``argv`` on ``node`` with each folder or file of ``mounts`` bound at its path (mount
    points on the machine are created when missing, like the harness's own)."""
    binds = []
    for source, target in mounts.items():
        make = f"mkdir -p {shlex.quote(target)}" if source.is_dir() else f"touch {shlex.quote(target)}"
        binds.append(f"{make} && mount --bind {shlex.quote(str(source))} {shlex.quote(target)}")
    script = " && ".join([*binds, 'exec "$@"'])
    # A mount namespace of its own: a real node's processes share one, which the pod's mounts must not enter.
    private = ["unshare", "--mount", "--propagation", "private"]
    return cluster.network.start(node.host, name, [*private, "sh", "-c", script, "sh", *argv], env=env)
