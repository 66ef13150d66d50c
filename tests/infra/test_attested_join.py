"""A new node's client certificate needs Azure's word on the machine: nothing approves a request sent with the
bootstrap token but the approver on the apiservers, and it approves one only when Azure's attested document,
made for the request's own key, and Azure Resource Manager's record of the VM say the request's name is that
VM's, of a node pool's scale set or a NAT host of this cluster (known by their names' prefixes, so a new pool
changes nothing on the apiservers). Each refusal beside the genuine request it differs from.
The documents are signed as the box's IMDS stand-in signs them (tests/e2e/imds.py), with a test root in place of
Azure's. Against the real apiserver: tests/e2e/test_node_labels.py."""

from __future__ import annotations

import base64
import dataclasses
import datetime
import hashlib
import json

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from infra.config import naming
from infra.config.sizing import shards
from infra.control_plane import cluster_objects, csr_approval
from infra.facts import attestation
from tests.e2e import imds
from tests.e2e.attestation import ROOT_FILE, Attestation
from tests.helpers import parsed, require_tool
from tests.infra.control_plane_files import approver_program

STACK = "dev"


@pytest.fixture(scope="module")
def approver():
    return approver_program()


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    require_tool("openssl")
    return Attestation(tmp_path_factory.mktemp("attestation"))


@pytest.fixture(scope="module")
def config(box):
    rendered = json.loads(csr_approval.approver_config(parsed(STACK)))
    return box.approver_config(rendered, str(box.directory / ROOT_FILE))


def _instance(stack_config, index: int = 7, shard_name: str = "") -> tuple[str, str]:
    """``(node name, resource ID)`` of an instance of a shard's scale set (the first pool's first shard unless
    named), as Azure names them."""
    shard_name = shard_name or shards(stack_config.node_pools[0])[0].name
    name = f"{naming.computer_name_prefix(shard_name)}00000{index}"
    group = naming.node_resource_group(stack_config.cluster_name)
    scale_set = naming.scale_set(stack_config.cluster_name, shard_name)
    resource = (
        f"/subscriptions/{imds.SUBSCRIPTION}/resourceGroups/{group}/providers/Microsoft.Compute/"
        f"virtualMachineScaleSets/{scale_set}/virtualMachines/{index}"
    )
    return name, resource


class FakeAzure:
    def __init__(self, records):
        self.records = records

    def subscription(self):
        return imds.SUBSCRIPTION

    def vm(self, resource_id):
        return self.records.get(resource_id)


def _join(box, name, resource, vm_id, *, key=None, document_key=None, directory=None, nonce=None, annotated=True):
    """A request as the node's join program sends it, and its document (made for ``document_key``'s nonce)."""
    key = key or ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, attestation.NODES_GROUP),
            x509.NameAttribute(NameOID.COMMON_NAME, attestation.NODE_USER_PREFIX + name),
        ]
    )
    pem = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(key, hashes.SHA256())
    spki = (
        (document_key or key)
        .public_key()
        .public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    nonce = nonce or hashlib.sha256(spki).hexdigest()[: attestation.NONCE_LENGTH]
    document = imds.attested_document(nonce, vm_id, directory or box.directory)
    annotations = {attestation.DOCUMENT_ANNOTATION: document, attestation.VM_ANNOTATION: resource}
    return {
        "metadata": {"name": f"node-join-{name}", "annotations": annotations if annotated else {}},
        "spec": {
            "signerName": attestation.KUBELET_CLIENT_SIGNER,
            "request": base64.b64encode(pem.public_bytes(serialization.Encoding.PEM)).decode(),
            "username": "system:bootstrap:abc123",
            "groups": ["system:bootstrappers", attestation.BOOTSTRAP_GROUP, "system:authenticated"],
            "usages": ["digital signature", "client auth"],
        },
    }


def _now():
    return datetime.datetime.now(datetime.UTC)


def test_the_controller_manager_approves_no_node_client_request():
    """Its csrapproving approves a new node's request when the requester may create ``nodeclient``, and a renewal
    when it may create ``selfnodeclient``: the token's group is granted node-bootstrapper (create CSRs) and
    nothing else, and no one is granted either subresource, so every node client certificate, renewals included,
    is the approver's (with Azure's word)."""
    bindings = [o for o in cluster_objects.node_join_rbac() if o["kind"] == "ClusterRoleBinding"]
    token = [b["roleRef"]["name"] for b in bindings if b["subjects"][0]["name"] == attestation.BOOTSTRAP_GROUP]
    assert token == ["system:node-bootstrapper"]
    objects = cluster_objects.cluster_objects(parsed(STACK))
    granted = [o["roleRef"]["name"] for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    assert not [r for r in granted if r.endswith((":nodeclient", ":selfnodeclient"))], granted


def _renewal(name: str, user: str | None = None, **request) -> dict:
    """A node's request, as itself, for a new client certificate (kubelet's client rotation)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, attestation.NODES_GROUP),
            x509.NameAttribute(NameOID.COMMON_NAME, attestation.NODE_USER_PREFIX + request.get("cn", name)),
        ]
    )
    pem = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(key, hashes.SHA256())
    return {
        "metadata": {"name": f"renewal-{name}"},
        "spec": {
            "signerName": attestation.KUBELET_CLIENT_SIGNER,
            "request": base64.b64encode(pem.public_bytes(serialization.Encoding.PEM)).decode(),
            "username": user or attestation.NODE_USER_PREFIX + name,
            "groups": [attestation.NODES_GROUP, "system:authenticated"],
            "usages": request.get("usages", ["digital signature", "client auth"]),
        },
    }


def _registered(name: str, resource: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"providerID": f"azure://{resource}"}}


def test_a_node_renews_its_client_certificate_only_while_azure_has_its_vm(approver, config):
    """A renewal is approved only for the node's own name, while Resource Manager still has the VM its Node's
    providerID names, under that name; a stolen certificate of a node whose VM is gone renews no more (the
    controller-manager approved every renewal of a node's own name, whatever Azure said)."""
    name, resource = _instance(parsed(STACK))
    machines = config["machines"]
    present = FakeAzure({resource: _record("any", name)})
    verdict, reason = approver.decide_renewal(_renewal(name), _registered(name, resource), present, machines)
    assert verdict == approver.Verdict.APPROVE, reason
    verdict, reason = approver.decide_renewal(_renewal(name), _registered(name, resource), FakeAzure({}), machines)
    assert verdict == approver.Verdict.DENY and "no such VM" in reason, reason
    # Another node's name, as this node, or a name beside its own: denied before Azure is asked.
    other, _ = _instance(parsed(STACK), index=8)
    for csr in (_renewal(name, cn=other), _renewal(name, usages=["digital signature", "server auth"])):
        verdict, reason = approver.decide_renewal(csr, _registered(name, resource), present, machines)
        assert verdict == approver.Verdict.DENY, reason
    # No Node (deleted, or not yet registered again): pending.
    verdict, reason = approver.decide_renewal(_renewal(name), None, present, machines)
    assert verdict == approver.Verdict.WAIT, reason


def test_the_genuine_request_of_a_node_pools_vm_is_approved(approver, box, config):
    name, resource = _instance(parsed(STACK))
    vm_id = "2f6b9e0a-0000-4000-8000-000000000007"
    azure = FakeAzure({resource: {"properties": {"vmId": vm_id, "osProfile": {"computerName": name}}}})
    verdict, reason = approver.decide_client(_join(box, name, resource, vm_id), config, azure, _now())
    assert verdict == approver.Verdict.APPROVE, reason


def _record(vm_id: str, name: str) -> dict:
    return {"properties": {"vmId": vm_id, "osProfile": {"computerName": name}}}


def _with_a_new_pool(stack_config):
    new = dataclasses.replace(stack_config.node_pools[0], name="new")
    return dataclasses.replace(stack_config, node_pools=(*stack_config.node_pools, new))


def test_the_apiservers_settings_name_no_pool_so_a_new_pool_leaves_them_as_they_are():
    """The approver knows the cluster's machines by their names' prefixes, not by a list (a list made every pool
    added roll the control plane: tests/stacks/test_state_safety.py)."""
    stack_config = parsed(STACK)
    assert csr_approval.approver_config(_with_a_new_pool(stack_config)) == csr_approval.approver_config(stack_config)


@pytest.mark.slow  # two signed requests verified by openssl (about half a second)
def test_a_node_of_a_pool_added_after_the_apiservers_were_built_and_a_nat_host_are_approved(approver, box, config):
    stack_config = parsed(STACK)
    added = _with_a_new_pool(stack_config)
    vm_id = "2f6b9e0a-0000-4000-8000-000000000007"
    name, resource = _instance(stack_config, shard_name=shards(added.node_pools[-1])[0].name)
    nat = naming.nat_host(stack_config.cluster_name, 0)
    nat_resource = (
        f"/subscriptions/{imds.SUBSCRIPTION}/resourceGroups/{naming.resource_group(stack_config.cluster_name)}"
        f"/providers/Microsoft.Compute/virtualMachines/{nat}"
    )
    for claimed, vm in ((name, resource), (nat, nat_resource)):
        azure = FakeAzure({vm: _record(vm_id, claimed)})
        verdict, reason = approver.decide_client(_join(box, claimed, vm, vm_id), config, azure, _now())
        assert verdict == approver.Verdict.APPROVE, (claimed, reason)


@pytest.mark.parametrize(
    "case",
    [
        "no document",
        "another key's document",
        "another VM's name",
        "another VM's document",
        "a VM of another resource group",
        "a VM of another subscription",
        "a scale set without the pools' prefix",
        "a VM of the cluster's group without the NAT hosts' prefix",
        "signed under another root",
        "stale",
    ],
)
def test_a_request_without_azures_word_for_its_name_is_denied(approver, box, config, case, tmp_path):
    stack_config = parsed(STACK)
    name, resource = _instance(stack_config)
    vm_id = "2f6b9e0a-0000-4000-8000-000000000007"
    record = {"properties": {"vmId": vm_id, "osProfile": {"computerName": name}}}
    records = {resource: record}
    now = _now()
    kwargs = {}
    claimed_name, claimed_resource, claimed_vm = name, resource, vm_id
    if case == "another key's document":  # a document read from another node's request, sent with a new key
        kwargs["document_key"] = ec.generate_private_key(ec.SECP256R1())
    elif case == "another VM's name":  # a genuine document of this VM, claiming a name that is not its own
        claimed_name = _instance(stack_config, 8)[0]
    elif case == "another VM's document":  # the document of a VM other than the one named
        claimed_vm = "2f6b9e0a-0000-4000-8000-000000000099"
    elif case == "a VM of another resource group":
        claimed_resource = resource.replace(naming.node_resource_group(stack_config.cluster_name), "someone-elses-rg")
        records[claimed_resource] = record
    elif case == "a VM of another subscription":
        claimed_resource = resource.replace(imds.SUBSCRIPTION, "11111111-1111-1111-1111-111111111111")
        records[claimed_resource] = record
    elif case == "a scale set without the pools' prefix":  # in the node group, but not named as a pool's
        claimed_resource = resource.replace(f"/{naming.node_scale_set_prefix(stack_config.cluster_name)}", "/other-")
        records[claimed_resource] = record
    elif case == "a VM of the cluster's group without the NAT hosts' prefix":  # an etcd member, say
        claimed_name = naming.etcd_member(f"{stack_config.cluster_name}-etcd", 0)
        group = naming.resource_group(stack_config.cluster_name)
        claimed_resource = (
            f"/subscriptions/{imds.SUBSCRIPTION}/resourceGroups/{group}/providers/Microsoft.Compute/"
            f"virtualMachines/{claimed_name}"
        )
        records[claimed_resource] = _record(vm_id, claimed_name)
    elif case == "signed under another root":
        other = Attestation(tmp_path / "other")
        kwargs["directory"] = other.directory
    elif case == "stale":
        now += datetime.timedelta(hours=1)
    csr = _join(box, claimed_name, claimed_resource, claimed_vm, annotated=case != "no document", **kwargs)
    verdict, reason = approver.decide_client(csr, config, FakeAzure(records), now)
    assert verdict == approver.Verdict.DENY, (case, reason)


def test_an_azure_that_does_not_answer_leaves_the_request_pending(approver, box, config):
    name, resource = _instance(parsed(STACK))

    class Down(FakeAzure):
        def vm(self, resource_id):
            raise OSError("management.azure.com unreachable")

    csr = _join(box, name, resource, "2f6b9e0a-0000-4000-8000-000000000007")
    with pytest.raises(OSError):
        approver.decide_client(csr, config, Down({}), _now())


def test_the_approver_and_the_join_program_agree_on_every_fact_they_share():
    """The annotations, nonce length and signer the node renders are what every apiserver's approver reads."""
    from infra.node import join

    node = json.loads(join.join_config("https://10.0.0.4:6443"))
    approver_config = json.loads(csr_approval.approver_config(parsed(STACK)))
    for key in ("document_annotation", "vm_annotation", "nonce_length"):
        assert node[key] == approver_config[key]
    assert node["signer"] == approver_config["client_signer"]
    assert approver_config["attestation_signer"] == "metadata.azure.com"


def _chain_with_intermediate(directory, issuer_url: str) -> bytes:
    """A root, an intermediate and a ``metadata.azure.com`` signer whose CA Issuers field names ``issuer_url``
    (as Azure's does: the document carries no intermediate), written where the stand-in IMDS signs from; returns
    the intermediate as DER, what that URL serves."""
    directory.mkdir()
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)

    def certificate(name, key, issuer_name, issuer_key, *, ca, extra=()):
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(issuer_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(hours=2))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        for extension in extra:
            builder = builder.add_extension(extension, critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    keys = [ec.generate_private_key(ec.SECP256R1()) for _ in range(3)]
    root = certificate(
        "test root", keys[0], x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test root")]), keys[0], ca=True
    )
    middle = certificate("test issuing CA", keys[1], root.subject, keys[0], ca=True)
    aia = x509.AuthorityInformationAccess(
        [
            x509.AccessDescription(
                x509.oid.AuthorityInformationAccessOID.CA_ISSUERS, x509.UniformResourceIdentifier(issuer_url)
            )
        ]
    )
    signer = certificate(attestation.ATTESTATION_SIGNER, keys[2], middle.subject, keys[1], ca=False, extra=[aia])
    (directory / ROOT_FILE).write_bytes(root.public_bytes(serialization.Encoding.PEM))
    (directory / imds.SIGNER_CERT).write_bytes(signer.public_bytes(serialization.Encoding.PEM))
    (directory / imds.SIGNER_KEY).write_bytes(
        keys[2].private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return middle.public_bytes(serialization.Encoding.DER)


@pytest.mark.slow  # a chain of three certificates, two requests verified by openssl
@pytest.mark.parametrize("case", ["fetched, then cached", "a host off the list", "not fetched"])
def test_the_signers_intermediate_comes_only_from_microsofts_hosts_and_anything_else_is_denied(
    approver, box, config, case, tmp_path, monkeypatch
):
    """Azure's signer is issued by an intermediate its CA Issuers URL names: fetched only from the allowed hosts
    (attestation.INTERMEDIATE_HOSTS), kept on disk, and any failure denies (the node asks again)."""
    host = attestation.INTERMEDIATE_HOSTS[-1] if case != "a host off the list" else "certificates.example.net"
    url = f"http://{host}/pkiops/certs/test%20issuing%20CA.crt"
    middle = _chain_with_intermediate(tmp_path / "azure", url)
    settings = {
        **config,
        "attestation_roots": str(tmp_path / "azure" / ROOT_FILE),
        "intermediate_cache": str(tmp_path / "cache"),
    }
    fetched = []

    def fetch(asked):
        fetched.append(asked)
        if case == "not fetched":
            raise OSError("connection refused")
        return middle

    monkeypatch.setattr(approver, "fetch", fetch)
    name, resource = _instance(parsed(STACK))
    vm_id = "2f6b9e0a-0000-4000-8000-000000000007"
    azure = FakeAzure({resource: _record(vm_id, name)})
    for _ in range(2 if case == "fetched, then cached" else 1):
        csr = _join(box, name, resource, vm_id, directory=tmp_path / "azure")
        verdict, reason = approver.decide_client(csr, settings, azure, _now())
        assert verdict == (approver.Verdict.APPROVE if case == "fetched, then cached" else approver.Verdict.DENY), (
            reason
        )
    assert fetched == ([] if case == "a host off the list" else [url])


def test_the_approver_asks_imds_for_one_resource_manager_token_per_reuse_period(approver, tmp_path, monkeypatch):
    """Each ask is two IMDS requests (IMDS allows a VM 5 a second) and a node's decision makes two or three Resource
    Manager reads: one token serves them all until it is ``TOKEN_REUSE_SECONDS`` old, or Resource Manager refuses it."""
    asked = tmp_path / "asked"
    command = ["sh", "-c", f"echo x >> {asked}; echo token-$(wc -l < {asked})"]
    azure = approver.Azure({"token_command": command, "arm_endpoint": "https://arm.invalid"})
    sent = []

    def get(url, headers, context=None):
        sent.append(headers["Authorization"])
        if url.endswith("refused?api-version=v"):
            raise approver.urllib.error.HTTPError(url, 401, "refused", {}, None)
        return {"id": url}

    monkeypatch.setattr(azure, "get", get)
    for _ in range(3):
        azure.arm("/vm", "v")
    assert sent == ["Bearer token-1"] * 3
    with pytest.raises(approver.urllib.error.HTTPError):
        azure.arm("/refused", "v")
    azure.arm("/vm", "v")  # a refused token is not used again
    assert sent[-1] == "Bearer token-2"
    azure.token_until = 0.0  # as if TOKEN_REUSE_SECONDS had passed
    azure.arm("/vm", "v")
    assert sent[-1] == "Bearer token-3" and asked.read_text().count("x") == 3
