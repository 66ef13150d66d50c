"""A node's certificate and labels, against dev's real apiserver, controller-manager and the approver every
apiserver runs. The bootstrap token alone gets no node certificate: a request without Azure's attested document,
or with a genuine document of a VM that is not the node it names, stays unapproved (denied, no certificate).
A VM Azure attests under that name gets one, and even then cannot claim another pool's or a team's labels, on
its Node's creation or afterwards through either the Node or its status; an operator still labels nodes as
before. The control plane alone is booted: the node is a key, a CSR, curl and kubectl, as an attacker's would
be; the operator's host stands in as the VM (the box's IMDS stand-in signs its document, tests/e2e/attestation.py).
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from pathlib import Path

import pytest
import yaml
from cryptography.hazmat.primitives import serialization

from infra.control_plane.admission import TEAM_TAINT_KEY
from infra.control_plane.cluster_objects import rendered_node_labels
from infra.facts import attestation
from infra.facts.labels import POOL_LABEL
from infra.node.cni import IMDS_IP
from tests.e2e.cluster import Cluster, boot
from tests.e2e.fleet import Fleet, fleet_pools
from tests.e2e.hosts import wait_for
from tests.e2e.pki import node_csr
from tests.e2e.plan_machines import Machine

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


def _as_vm(cluster: Cluster, name: str, prefix: str) -> str:
    """The operator's host becomes, in Azure's word (the IMDS stand-in), instance ``name`` of the scale set of
    computer-name prefix ``prefix``; returns its resource ID."""
    (scale_set,) = [s for s in cluster.plan.scale_sets() if s.computer_name_prefix == prefix]
    resource = f"{scale_set.azure_id}/virtualMachines/{int(uuid.uuid4().hex[:6], 16)}"
    cluster.attestation.add(Machine("operator", name, cluster.admin.ip, Path(), azure_id=resource))
    cluster.network.run(cluster.admin, ["ip", "route", "replace", f"{IMDS_IP}/32", "dev", "eth0"])
    return resource


def _attested_document(cluster: Cluster, key) -> str:
    """What the node's join program asks IMDS for: the attested document, its nonce bound to ``key``."""
    spki = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    nonce = hashlib.sha256(spki).hexdigest()[: attestation.NONCE_LENGTH]
    url = f"http://{IMDS_IP}{attestation.ATTESTED_PATH}?api-version={attestation.ATTESTED_API_VERSION}&nonce={nonce}"
    answer = cluster.network.run(cluster.admin, ["curl", "-sf", "--max-time", "20", "-H", "Metadata: true", url])
    return json.loads(answer.stdout)["signature"]


def _send(cluster: Cluster, node: str, annotations: dict[str, str]):
    """A key and a CSR for ``system:node:<node>`` sent with the bootstrap token; returns the key and its name."""
    csr_name = f"fake-{uuid.uuid4().hex[:8]}"
    key, csr = node_csr(node, csr_name, attestation.KUBELET_CLIENT_SIGNER, ["digital signature", "client auth"])
    csr["metadata"]["annotations"] = annotations(key) if callable(annotations) else annotations
    bootstrap = _kubeconfig(cluster, "bootstrap", {"token": cluster.pki.bootstrap_token})
    cluster.kubectl("create", "-f", "-", input=json.dumps(csr), kubeconfig=bootstrap)
    return key, csr_name


def _concluded(cluster: Cluster, csr_name: str) -> dict:
    return wait_for(
        f"a decision on {csr_name}",
        lambda: (c := cluster.get_json("csr", csr_name)).get("status", {}).get("conditions") and c,
        timeout=120,
        interval=2,
    )


def _node_certificate(cluster: Cluster, node: str, resource: str) -> Path:
    """What the node's join program does: a key, a CSR for ``system:node:<node>`` sent with the bootstrap token and
    Azure's attested document for that key, the certificate the approver approves and the controller-manager signs;
    returns a kubeconfig that acts as that node."""
    key, csr_name = _send(
        cluster,
        node,
        lambda key: {
            attestation.DOCUMENT_ANNOTATION: _attested_document(cluster, key),
            attestation.VM_ANNOTATION: resource,
        },
    )
    issued = wait_for(
        "the approver to approve, and the controller-manager to sign, the attested node's CSR",
        lambda: cluster.get_json("csr", csr_name).get("status", {}).get("certificate"),
        timeout=120,
        interval=2,
        on_timeout=lambda: json.dumps(cluster.get_json("csr", csr_name).get("status"), indent=1),
    )
    cert, key_path = cluster.workdir / f"{node}.crt", cluster.workdir / f"{node}.key"
    cert.write_bytes(base64.b64decode(issued))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return _kubeconfig(cluster, node, {"client-certificate": str(cert), "client-key": str(key_path)})


def test_the_bootstrap_token_alone_gets_no_node_certificate(control_plane: Cluster):
    """Without Azure's attested document, or with a genuine one of a VM that is not the node named (another
    pool's instance name), the request is denied and never signed; before the attested join the
    controller-manager approved the first within seconds."""
    by_prefix, _ = rendered_node_labels(control_plane.spec.config)
    own = next(p for p, labels in by_prefix.items() if TEAM_TAINT_KEY not in labels)
    other = next(p for p, labels in by_prefix.items() if TEAM_TAINT_KEY in labels)
    name = f"{own}zy{uuid.uuid4().hex[:4]}"
    resource = _as_vm(control_plane, name, own)
    _, bare = _send(control_plane, f"{other}zy{uuid.uuid4().hex[:4]}", {})
    _, borrowed = _send(
        control_plane,
        f"{other}zx{uuid.uuid4().hex[:4]}",
        lambda key: {
            attestation.DOCUMENT_ANNOTATION: _attested_document(control_plane, key),
            attestation.VM_ANNOTATION: resource,
        },
    )
    for csr_name, why in ((bare, "no attested document"), (borrowed, "not")):
        csr = _concluded(control_plane, csr_name)
        conditions = {c["type"]: c for c in csr["status"]["conditions"]}
        assert set(conditions) == {"Denied"} and why in conditions["Denied"]["message"], csr["status"]
        assert not csr["status"].get("certificate")


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
    as_node = _node_certificate(control_plane, name, _as_vm(control_plane, name, own))

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
