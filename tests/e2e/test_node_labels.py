"""A node registered with the bootstrap token, against dev's real apiserver and controller-manager: it gets a
node certificate (the token's holder can), but cannot claim another pool's or a team's labels, on its Node's
creation or afterwards through either the Node or its status; an operator still labels nodes as before. The
control plane alone is booted: the fake node is a key, a CSR and kubectl, as an attacker's would be.
"""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path

import pytest
import yaml
from cryptography.hazmat.primitives import serialization

from infra.control_plane.admission import TEAM_TAINT_KEY
from infra.control_plane.cluster_objects import rendered_node_labels
from infra.facts.labels import POOL_LABEL
from tests.e2e.cluster import Cluster, boot
from tests.e2e.fleet import Fleet, fleet_pools
from tests.e2e.hosts import wait_for
from tests.e2e.pki import node_csr

pytestmark = pytest.mark.e2e
REFUSED = "a node may carry only the labels rendered for its pool"


@pytest.fixture(scope="module")
def control_plane(binaries: Path, tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    cluster = boot("dev", tmp_path_factory.mktemp("dev-node-labels"), binaries, with_nodes=False)
    yield cluster
    cluster.close()


def _kubeconfig(cluster: Cluster, name: str, user: dict[str, str]) -> Path:
    path = cluster.workdir / f"{name}.conf"
    server = {"server": cluster.apiserver_url, "certificate-authority": str(cluster.workdir / "ca.crt")}
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "box", "cluster": server}],
                "users": [{"name": name, "user": user}],
                "contexts": [{"name": "box", "context": {"cluster": "box", "user": name}}],
                "current-context": "box",
            }
        )
    )
    return path


def _node_certificate(cluster: Cluster, node: str) -> Path:
    """What a bootstrap token's holder does: a key, a CSR for ``system:node:<node>`` sent with the token, and
    the certificate the controller-manager approves and signs; returns a kubeconfig that acts as that node."""
    csr_name = f"fake-{uuid.uuid4().hex[:8]}"
    key, csr = node_csr(
        node, csr_name, "kubernetes.io/kube-apiserver-client-kubelet", ["digital signature", "client auth"]
    )
    bootstrap = _kubeconfig(cluster, "bootstrap", {"token": cluster.pki.bootstrap_token})
    cluster.kubectl("create", "-f", "-", input=json.dumps(csr), kubeconfig=bootstrap)
    issued = wait_for(
        "the controller-manager to approve and sign the fake node's CSR",
        lambda: cluster.get_json("csr", csr_name).get("status", {}).get("certificate"),
        timeout=120,
        interval=2,
    )
    cert, key_path = cluster.workdir / f"{node}.crt", cluster.workdir / f"{node}.key"
    cert.write_bytes(base64.b64decode(issued))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return _kubeconfig(cluster, node, {"client-certificate": str(cert), "client-key": str(key_path)})


def _patch_status(cluster: Cluster, node: str, patch: dict) -> tuple[bool, str]:
    """A merge patch of the Node's status as kubelet sends it (no GET first: a node may not read nodes/status),
    with the node's own certificate."""
    argv = ["curl", "-s", "--max-time", "20", "-X", "PATCH", "--cacert", str(cluster.workdir / "ca.crt")]
    argv += ["--cert", str(cluster.workdir / f"{node}.crt"), "--key", str(cluster.workdir / f"{node}.key")]
    argv += ["-H", "Content-Type: application/merge-patch+json", "--data", json.dumps(patch), "-w", "\n%{http_code}"]
    url = f"{cluster.apiserver_url}/api/v1/nodes/{node}/status"
    body, _, status = cluster.network.run(cluster.admin, [*argv, url], timeout=40).stdout.rpartition("\n")
    return status == "200", body


def _as(cluster: Cluster, kubeconfig: Path, *args: str, input: str | None = None) -> tuple[bool, str]:
    result = cluster.kubectl(*args, input=input, kubeconfig=kubeconfig, check=False)
    return result.returncode == 0, result.stderr + result.stdout


def test_a_node_registered_with_the_bootstrap_token_cannot_claim_another_pools_labels(control_plane: Cluster):
    by_prefix, _ = rendered_node_labels(control_plane.spec.config)
    own = next(p for p, labels in by_prefix.items() if TEAM_TAINT_KEY not in labels)
    other = next(p for p, labels in by_prefix.items() if TEAM_TAINT_KEY in labels)  # dev's GPU pool is a team's
    name = f"{own}zz{uuid.uuid4().hex[:4]}"  # the shape of an instance of ``own``'s scale set
    as_node = _node_certificate(control_plane, name)

    def node(labels: dict[str, str]) -> str:
        return json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}})

    # Registering with another pool's labels, or only its team's, is refused, and the message names them.
    for claimed in (by_prefix[other], {**by_prefix[own], TEAM_TAINT_KEY: by_prefix[other][TEAM_TAINT_KEY]}):
        ok, output = _as(control_plane, as_node, "create", "-f", "-", input=node(claimed))
        assert not ok and REFUSED in output and TEAM_TAINT_KEY in output, output
    # Its own name's labels are what a real node of that pool registers with: admitted.
    ok, output = _as(control_plane, as_node, "create", "-f", "-", input=node(by_prefix[own]))
    assert ok, output
    # Relabelling afterwards is refused too, through the Node and through its status.
    team = f"{TEAM_TAINT_KEY}={by_prefix[other][TEAM_TAINT_KEY]}"
    ok, output = _as(control_plane, as_node, "label", "node", name, team)
    assert not ok and REFUSED in output, output
    ok, output = _patch_status(
        control_plane, name, {"metadata": {"labels": {POOL_LABEL: by_prefix[other][POOL_LABEL]}}}
    )
    assert not ok and REFUSED in output, output
    assert control_plane.get_json("node", name)["metadata"]["labels"][POOL_LABEL] == by_prefix[own][POOL_LABEL]
    # An operator labels as before, and the node keeps updating its status with that label on it.
    control_plane.kubectl("label", "node", name, team)
    ok, output = _patch_status(control_plane, name, {"metadata": {"annotations": {"box.supercluster.io/probe": "1"}}})
    assert ok, output
    control_plane.kubectl("delete", "node", name, "--wait=false")


def test_the_simulated_fleet_registers_its_pools_labels_under_its_pools_names(
    control_plane: Cluster, binaries: Path, tmp_path: Path
):
    """The fault suite's and the benchmarks' fleet registers as kubelets do (impersonated ``system:node:<name>``),
    so the policy judges it too: named as Azure names each pool's VMs, every node is admitted with its labels."""
    fleet = Fleet(control_plane, str(binaries / "fleet"), tmp_path, fleet_pools(control_plane))
    fleet.grow({p["name"]: 2 for p in fleet.pools}, prefix="labels", timeout=180)
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"] for n in control_plane.get_json("nodes")["items"]}
    for pool in fleet.pools:
        names = [n for n in fleet.names if n.startswith(pool["namePrefix"])]
        assert len(names) == 2 and all(nodes[n][POOL_LABEL] == pool["labels"][POOL_LABEL] for n in names), names
