"""A node's certificate and labels, against dev's real apiserver, controller-manager and the approver every
apiserver runs. The bootstrap token alone gets no node certificate: a request without Azure's attested document,
or with a genuine document of a VM that is not the node it names, stays unapproved (denied, no certificate).
A VM Azure attests under that name gets one, and even then cannot claim another pool's or a team's labels, on
its Node's creation or afterwards through either the Node or its status; an operator still labels nodes as
before. The control plane alone is booted: the node is a key, a CSR, curl and kubectl, as an attacker's would
be; the operator's host stands in as the VM (the box's IMDS stand-in signs its document, tests/e2e/attestation.py).

The bootstrap token expires: the minter on the apiserver (``machine/control_plane/token_minter.py``) puts a token of
the nodes' group that expires in a day into Key Vault (the stand-in), and a node joins with it; the minter's own
identity can create nothing but such a token (its RBAC and admission policy, infra/control_plane/token_minting.py);
and a token past its expiration is refused by the apiserver and deleted by tokencleaner. A node's own join program,
refused its expired token, reads Key Vault again with the node's rendered fetch script and joins with the minted
token, without a restart.

A node renews its certificate as itself, approved by the approver (not the controller-manager) only while Azure
has the VM its Node's providerID names.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import os
import re
import time
import uuid
from pathlib import Path

import pytest
import yaml
from cryptography.hazmat.primitives import serialization

from infra.boot.secret_names import NODE_BOOTSTRAP_TOKEN
from infra.boot.secrets import FETCH_SCRIPT_PATH
from infra.control_plane import admission, paths, pki, token_minting
from infra.control_plane.admission import TEAM_TAINT_KEY
from infra.control_plane.cluster_objects import rendered_node_labels
from infra.control_plane.token_minting import BOOTSTRAP_TOKEN_TYPE, bootstrap_token_data
from infra.facts import attestation
from infra.facts.labels import POOL_LABEL
from infra.node import kubelet
from infra.node.cni import IMDS_IP
from tests.e2e import imds
from tests.e2e.cluster import Cluster, boot, install, node_join
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


def _send(cluster: Cluster, node: str, annotations: dict[str, str], token: str | None = None):
    """A key and a CSR for ``system:node:<node>`` sent with the bootstrap token (``token``: the program's first one
    unless named); returns the key and its name."""
    csr_name = f"fake-{uuid.uuid4().hex[:8]}"
    key, csr = node_csr(node, csr_name, attestation.KUBELET_CLIENT_SIGNER, ["digital signature", "client auth"])
    csr["metadata"]["annotations"] = annotations(key) if callable(annotations) else annotations
    bootstrap = _kubeconfig(cluster, "bootstrap", {"token": token or cluster.pki.bootstrap_token})
    cluster.kubectl("create", "-f", "-", input=json.dumps(csr), kubeconfig=bootstrap)
    return key, csr_name


def _concluded(cluster: Cluster, csr_name: str) -> dict:
    return wait_for(
        f"a decision on {csr_name}",
        lambda: (c := cluster.get_json("csr", csr_name)).get("status", {}).get("conditions") and c,
        timeout=120,
        interval=2,
    )


def _node_certificate(cluster: Cluster, node: str, resource: str, token: str | None = None) -> Path:
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
        token,
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


# ---------------------------------------------------------------------------------------- the bootstrap token


def _minted(cluster: Cluster) -> str:
    """The token the minter put into Key Vault (the stand-in), once it has."""
    return wait_for(
        "the token minter's token in Key Vault",
        lambda: cluster.attestation.vault().get(NODE_BOOTSTRAP_TOKEN),
        timeout=120,
        interval=2,
    )


def _token(cluster: Cluster, token_id: str) -> tuple[dict[str, str], dict]:
    """The token's Secret's data, decoded, and its metadata."""
    secret = cluster.get_json("secret", "-n", "kube-system", f"bootstrap-token-{token_id}")
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}, secret["metadata"]


def _expiration(text: str) -> datetime.datetime:
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)


def test_the_minter_puts_a_token_that_expires_in_a_day_into_key_vault_and_a_node_joins_with_it(
    control_plane: Cluster,
):
    token = _minted(control_plane)
    token_id = token.split(".", 1)[0]
    assert token != control_plane.pki.bootstrap_token  # not the program's first token: the minter's own
    data, metadata = _token(control_plane, token_id)
    lifetime = (_expiration(data["expiration"]) - _expiration(metadata["creationTimestamp"])).total_seconds()
    assert abs(lifetime - token_minting.LIFETIME_SECONDS) <= 5, (data["expiration"], metadata["creationTimestamp"])
    assert data["auth-extra-groups"] == attestation.BOOTSTRAP_GROUP and "usage-bootstrap-signing" not in data
    assert metadata["labels"] == {token_minting.MINTED_LABEL: token_minting.MINTED_BY}
    lease = control_plane.get_json("lease", "-n", "kube-system", token_minting.LEASE)
    assert lease["metadata"]["annotations"][token_minting.TOKEN_ID_ANNOTATION] == token_id
    # A node joins with it: its attested CSR, sent with the minted token, is approved and signed.
    by_prefix, _ = rendered_node_labels(control_plane.spec.config)
    own = next(p for p, labels in by_prefix.items() if TEAM_TAINT_KEY not in labels)
    name = f"{own}zm{uuid.uuid4().hex[:4]}"
    as_node = _node_certificate(control_plane, name, _as_vm(control_plane, name, own), token)
    ok, output = _as(control_plane, as_node, "auth", "whoami")
    assert ok and f"system:node:{name}" in output, output
    joined = [
        c for c in control_plane.get_json("csr")["items"] if c["spec"]["username"] == f"system:bootstrap:{token_id}"
    ]
    assert joined and all(c["status"].get("certificate") for c in joined)


def _secret(name: str, namespace: str = "kube-system", kind: str = BOOTSTRAP_TOKEN_TYPE, **data) -> str:
    document = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace}}
    return json.dumps({**document, "type": kind, "stringData": data})


def test_the_minters_identity_creates_nothing_but_expiring_tokens_of_the_nodes_group(control_plane: Cluster):
    """As the minter's own certificate: RBAC allows no read of any Secret and no create outside kube-system; the
    admission policy refuses any Secret there but a bootstrap token of the nodes' group, for authentication only,
    that expires, and any Lease but its own. Such a token is admitted."""
    (cert, key) = (control_plane.workdir / f"token-minter.{ext}" for ext in ("crt", "key"))
    cert.write_text(control_plane.pki.vault[pki.cert_secret(pki.TOKEN_MINTER)])
    key.write_text(control_plane.pki.vault[pki.key_secret(pki.TOKEN_MINTER)])
    minter = _kubeconfig(control_plane, "token-minter", {"client-certificate": str(cert), "client-key": str(key)})
    now = datetime.datetime.now(datetime.UTC)
    soon = (now + datetime.timedelta(hours=23)).strftime("%Y-%m-%dT%H:%M:%SZ")

    def token(token_id: str, **changes: str | None) -> str:
        data = {**bootstrap_token_data(token_id, "0123456789abcdef", soon), **changes}
        return _secret(f"bootstrap-token-{token_id}", **{k: v for k, v in data.items() if v is not None})

    refused = {
        "an Opaque Secret": (_secret("box-opaque", kind="Opaque", a="b"), "only Secrets of type"),
        "another group's token": (
            token("boxaa1", **{"auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token"}),
            "only as the nodes' group",
        ),
        "a token that never expires": (token("boxaa2", expiration=None), "exactly the keys"),
        "a signing token": (token("boxaa4", **{"usage-bootstrap-signing": "true"}), "exactly the keys"),
    }
    for what, (document, message) in refused.items():
        ok, output = _as(control_plane, minter, "create", "-f", "-", input=document)
        assert not ok and admission.TOKEN_MINTER_POLICY in output and message in output, (what, output)
    for argv in (["get", "secrets", "-n", "kube-system"], ["get", "secret", "-n", "kube-system", "box-any"]):
        ok, output = _as(control_plane, minter, *argv)
        assert not ok and "Forbidden" in output, output
    ok, output = _as(
        control_plane, minter, "create", "-f", "-", input=token("boxaa6").replace("kube-system", "default")
    )
    assert not ok and "Forbidden" in output, output
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease"}
    lease["metadata"] = {"name": "kube-controller-manager-box", "namespace": "kube-system"}
    ok, output = _as(control_plane, minter, "create", "-f", "-", input=json.dumps(lease))
    assert not ok and f"only Lease is {token_minting.LEASE}" in output, output
    # What the minter makes is admitted (the policy's CEL, bytes and times, evaluates as written).
    ok, output = _as(control_plane, minter, "create", "-f", "-", input=token("boxaa7"))
    assert ok, output
    control_plane.kubectl("delete", "secret", "-n", "kube-system", "bootstrap-token-boxaa7")


def test_an_expired_token_is_refused_and_tokencleaner_deletes_it(control_plane: Cluster):
    """A token of the nodes' group that expires in 20 s: it lists CSRs until then, and is Unauthorized afterwards
    (within the apiserver's cache of a successful token check: 10 s, kube-apiserver's ``TokenSuccessCacheTTL``,
    pkg/kubeapiserver/options/authentication.go); tokencleaner then deletes its Secret."""
    expires = datetime.datetime.now(datetime.UTC).replace(microsecond=0) + datetime.timedelta(seconds=20)
    data = bootstrap_token_data("boxexp", "0123456789abcdef", expires.strftime("%Y-%m-%dT%H:%M:%SZ"))
    control_plane.kubectl("create", "-f", "-", input=_secret("bootstrap-token-boxexp", **data))
    holder = _kubeconfig(control_plane, "expiring", {"token": "boxexp.0123456789abcdef"})
    ok, output = _as(control_plane, holder, "get", "csr")
    assert ok, output  # valid until its expiration: it may list CSRs, as the nodes' group
    time.sleep(max(0.0, (expires - datetime.datetime.now(datetime.UTC)).total_seconds()))
    refused = wait_for(
        "the apiserver to refuse the expired token",
        lambda: (answer := _as(control_plane, holder, "get", "csr")) and not answer[0] and answer[1],
        timeout=30,
        interval=2,
    )
    assert "Unauthorized" in refused, refused
    wait_for(
        "tokencleaner to delete the expired token's Secret",
        lambda: (
            control_plane.kubectl(
                "get", "secret", "-n", "kube-system", "bootstrap-token-boxexp", check=False
            ).returncode
            != 0
        ),
        timeout=120,
        interval=2,
    )


def test_a_node_refused_its_expired_token_reads_key_vault_again_and_joins_without_a_restart(control_plane: Cluster):
    """A fresh instance of a pool, its rendered files and secrets installed as at boot, but its bootstrap token one
    that expired a minute ago (the minters stopped while it waited, say). Its rendered join program, run once, is
    refused (401), runs the node's rendered fetch script again, which reads the minter's token from Key Vault, and
    joins with it in the same run. The one substitution: the fetch script's Key Vault is the stand-in
    (``https://169.254.169.254:8443``, trusted through the box's attestation root, curl's CA bundle), which
    holds the node's other secrets as the deploy puts them (``Attestation.put_in_vault``) and the minter's token;
    its IMDS token helper runs for real against the IMDS stand-in, as the node's identity."""
    minted = _minted(control_plane)
    by_prefix, _ = rendered_node_labels(control_plane.spec.config)
    own = next(p for p, labels in by_prefix.items() if TEAM_TAINT_KEY not in labels)
    (scale_set,) = [s for s in control_plane.plan.scale_sets() if s.computer_name_prefix == own and s.first_shard]
    machine = scale_set.instance(0)  # this box boots no nodes: the instance is free
    prefix_length = control_plane.spec.config.network.address_space.prefixlen
    host = control_plane.network.add_host(machine.name, [f"{machine.ip}/{prefix_length}"])
    install(machine, host, control_plane.pki)
    control_plane.attestation.add(machine)
    expired = datetime.datetime.now(datetime.UTC).replace(microsecond=0) - datetime.timedelta(minutes=1)
    data = bootstrap_token_data("boxold", "0123456789abcdef", expired.strftime("%Y-%m-%dT%H:%M:%SZ"))
    control_plane.kubectl("create", "-f", "-", input=_secret("bootstrap-token-boxold", **data))
    token_file = host.root / kubelet.TOKEN_PATH.lstrip("/")
    token_file.write_text("boxold.0123456789abcdef\n")
    # Key Vault: the stand-in, with the node's secrets as the deploy puts them and the minter's token.
    fetched = [name for name, _, _ in machine.fetched_secrets() if name != NODE_BOOTSTRAP_TOKEN]
    control_plane.attestation.put_in_vault({name: control_plane.pki.vault[name] for name in fetched})
    root = f"{paths.KUBERNETES_DIR}/box-attestation-root.crt"
    (host.root / root.lstrip("/")).write_text(control_plane.attestation.root.cert_pem)
    fetch = host.root / FETCH_SCRIPT_PATH.lstrip("/")
    script, replaced = re.subn(
        r"^vault=https://\S+\.vault\.azure\.net$",
        f"export CURL_CA_BUNDLE={root}\nvault=https://{IMDS_IP}:{imds.ARM_PORT}",
        fetch.read_text(),
        flags=re.M,
    )
    assert replaced == 1, script
    fetch.write_text(script)
    output = node_join(control_plane, machine, host).stdout
    assert "HTTP Error 401" in output and output.count("reading Key Vault again") == 1, output
    assert token_file.read_text().strip() == minted, output
    link = host.root / kubelet.CLIENT_CERT.lstrip("/")  # kubelet's -current link, to a dated file on the machine
    installed = host.root / os.readlink(link).lstrip("/")
    assert installed.read_bytes().startswith(b"-----BEGIN CERTIFICATE-----"), output
    joined = [
        c
        for c in control_plane.get_json("csr")["items"]
        if c["spec"]["username"] == f"system:bootstrap:{minted.split('.', 1)[0]}"
        and c["metadata"]["name"].startswith(f"node-join-{machine.name}-")
    ]
    assert len(joined) == 1 and joined[0]["status"].get("certificate"), joined


def _renew(cluster: Cluster, as_node: Path, node: str) -> str:
    """What kubelet's client rotation sends: a new key's CSR for its own name, as the node (its current
    certificate); returns its name."""
    csr_name = f"renewal-{uuid.uuid4().hex[:8]}"
    _, csr = node_csr(node, csr_name, attestation.KUBELET_CLIENT_SIGNER, ["digital signature", "client auth"])
    ok, output = _as(cluster, as_node, "create", "-f", "-", input=json.dumps(csr))
    assert ok, output
    return csr_name


def test_a_node_renews_its_certificate_only_while_azure_has_its_vm(control_plane: Cluster):
    """No one is granted ``selfnodeclient``, so the controller-manager approves no renewal; the approver approves a
    node's request for its own name, sent as the node, while Azure (the stand-in as Resource Manager) has the VM
    its Node's providerID names under that name, and the controller-manager signs it. Once Azure has no such VM,
    a renewal with the same certificate is denied: a stolen node certificate no longer renews itself."""
    by_prefix, _ = rendered_node_labels(control_plane.spec.config)
    own = next(p for p, labels in by_prefix.items() if TEAM_TAINT_KEY not in labels)
    name = f"{own}zr{uuid.uuid4().hex[:4]}"
    resource = _as_vm(control_plane, name, own)
    as_node = _node_certificate(control_plane, name, resource)
    node = {"metadata": {"name": name, "labels": by_prefix[own]}, "spec": {"providerID": f"azure://{resource}"}}
    ok, output = _as(
        control_plane, as_node, "create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "Node", **node})
    )
    assert ok, output
    renewed = _renew(control_plane, as_node, name)
    conditions = {c["type"]: c for c in _concluded(control_plane, renewed)["status"]["conditions"]}
    assert set(conditions) == {"Approved"} and conditions["Approved"]["reason"] == "SuperclusterNodeRenewal", conditions
    wait_for(
        "the controller-manager to sign the renewal",
        lambda: control_plane.get_json("csr", renewed).get("status", {}).get("certificate"),
        timeout=60,
        interval=2,
    )
    control_plane.attestation.remove(control_plane.admin.ip)  # Azure has the VM no more
    refused = _renew(control_plane, as_node, name)
    csr = _concluded(control_plane, refused)
    conditions = {c["type"]: c for c in csr["status"]["conditions"]}
    assert set(conditions) == {"Denied"} and "no such VM" in conditions["Denied"]["message"], csr["status"]
    assert not csr["status"].get("certificate")
