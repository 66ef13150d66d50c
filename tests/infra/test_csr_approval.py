"""Kubelet serving certificates: the approver's decision, the files and unit every apiserver receives, and the
RBAC it runs with. Against the real apiserver and kubelets: tests/e2e/test_node_metrics.py."""

from __future__ import annotations

import base64
import ipaddress
import json

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

import machine as programs
from infra.boot.secrets import FETCH_UNIT
from infra.control_plane import cluster_objects, csr_approval, pki
from infra.node import kubelet
from tests.e2e.plan_machines import parse_unit
from tests.helpers import parsed
from tests.infra.control_plane_files import approver_program, files, machines

NODE = "box-cpu-000003"
NODE_IP = "10.1.0.7"
OTHER_NODE_IP = "10.1.0.8"
SERVING_USAGES = ["digital signature", "key encipherment", "server auth"]


@pytest.fixture(scope="module")
def approver():
    return approver_program()


def _request(
    common_name: str = f"system:node:{NODE}",
    organization: str = "system:nodes",
    dns: tuple[str, ...] = (NODE,),
    ips: tuple[str, ...] = (NODE_IP,),
    extra: tuple[x509.GeneralName, ...] = (),
) -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization)] if organization else []
    subject.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(subject))
    names = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips] + list(extra)
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    pem = builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
    return base64.b64encode(pem).decode()


def _csr(request: str | None = None, user: str = f"system:node:{NODE}", usages=SERVING_USAGES, groups=None) -> dict:
    return {
        "metadata": {"name": "csr-test"},
        "spec": {
            "signerName": csr_approval.KUBELET_SERVING_SIGNER,
            "request": request or _request(),
            "username": user,
            "groups": groups if groups is not None else ["system:nodes", "system:authenticated"],
            "usages": list(usages),
        },
    }


def _node(*addresses: tuple[str, str]) -> dict:
    registered = addresses or (("InternalIP", NODE_IP), ("Hostname", NODE))
    return {"metadata": {"name": NODE}, "status": {"addresses": [{"type": t, "address": a} for t, a in registered]}}


def test_a_request_for_the_nodes_own_registered_names_is_approved(approver):
    verdict, reason = approver.decide(_csr(), _node())
    assert verdict == approver.Verdict.APPROVE, reason


def test_a_request_naming_an_address_the_node_does_not_have_is_not_approved(approver):
    """A node asking for another node's address (to serve as it to the apiserver and Prometheus) is left
    pending, with the address named in the reason; the old design had no approver and no CA-signed certificate."""
    verdict, reason = approver.decide(_csr(_request(ips=(NODE_IP, OTHER_NODE_IP))), _node())
    assert verdict == approver.Verdict.WAIT
    assert OTHER_NODE_IP in reason
    verdict, reason = approver.decide(_csr(_request(dns=(NODE, "kubernetes.default.svc"))), _node())
    assert verdict == approver.Verdict.WAIT and "kubernetes.default.svc" in reason
    # An IP registered only as a name type, or a name only as an IP type, does not count.
    verdict, _ = approver.decide(_csr(_request(dns=(), ips=(NODE_IP,))), _node(("Hostname", NODE_IP)))
    assert verdict == approver.Verdict.WAIT


def test_a_request_for_a_node_that_does_not_exist_waits(approver):
    verdict, reason = approver.decide(_csr(), None)
    assert verdict == approver.Verdict.WAIT and NODE in reason


@pytest.mark.parametrize(
    "csr",
    [
        pytest.param(_csr(user="system:bootstrap:abc123", groups=["system:bootstrappers"]), id="bootstrap-token"),
        pytest.param(_csr(user=f"system:node:{NODE}", groups=["system:authenticated"]), id="not-in-system-nodes"),
        pytest.param(_csr(user="system:serviceaccount:default:x"), id="service-account"),
        pytest.param(_csr(usages=[*SERVING_USAGES, "client auth"]), id="client-auth"),
        pytest.param(_csr(usages=["digital signature", "key encipherment"]), id="no-server-auth"),
        pytest.param(_csr(_request(common_name="system:node:another")), id="subject-names-another-node"),
        pytest.param(_csr(_request(organization="system:masters")), id="subject-organization"),
        pytest.param(_csr(_request(extra=(x509.RFC822Name("a@b.c"),))), id="email-name"),
        pytest.param(_csr(_request(extra=(x509.UniformResourceIdentifier("spiffe://x"),))), id="uri-name"),
        pytest.param(_csr(_request(dns=(), ips=())), id="no-name"),
        pytest.param(_csr(base64.b64encode(b"not a request").decode()), id="unreadable"),
    ],
)
def test_a_request_that_can_never_pass_is_denied(approver, csr):
    verdict, reason = approver.decide(csr, _node())
    assert verdict == approver.Verdict.DENY, reason


def test_the_request_reader_agrees_with_a_full_x509_parser(approver):
    dns, ips = ("a.example", NODE), (NODE_IP, "fd00::1", "10.255.255.254")
    request = base64.b64decode(_request(dns=dns, ips=ips))
    read = approver.read_request(base64.b64decode(approver.pem_body(request)))
    parsed_request = x509.load_pem_x509_csr(request)
    names = parsed_request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert read["dns"] == names.get_values_for_type(x509.DNSName) == list(dns)
    assert read["ips"] == [str(i) for i in names.get_values_for_type(x509.IPAddress)] == list(ips)
    assert read["subject"] == {"2.5.4.10": ["system:nodes"], "2.5.4.3": [f"system:node:{NODE}"]}


def test_kubelets_ask_for_a_serving_certificate_from_the_cluster_ca():
    rendered = kubelet.config(cluster_dns="10.0.0.10", max_pods=30, taints=())
    assert rendered["serverTLSBootstrap"] is True and rendered["rotateCertificates"] is True
    assert "tlsCertFile" not in rendered and "tlsPrivateKeyFile" not in rendered


def test_every_apiserver_runs_the_approver_with_its_own_fetched_credential():
    """The same unit and settings on every apiserver (the per-role cloud-init), started after the secrets its
    credential comes from; the files it names are the ones the fetch writes; it approves only for the signer
    its RBAC names."""
    rendered = [files(m) for m in machines("prod")]
    assert len({r[csr_approval.CONFIG] for r in rendered}) == 1
    config = json.loads(rendered[0][csr_approval.CONFIG])
    fetched = {f.path for f in pki.apiserver_secret_files(pki.certificates())}
    assert {config["ca_cert"], config["cert"], config["key"]} <= fetched
    assert config["signer"] == csr_approval.KUBELET_SERVING_SIGNER
    assert config["client_signer"] == "kubernetes.io/kube-apiserver-client-kubelet"
    assert rendered[0][csr_approval.SCRIPT] == programs.source("control_plane/csr_approver.py")
    unit = parse_unit(csr_approval.UNIT, rendered[0][f"/etc/systemd/system/{csr_approval.UNIT}"])
    assert unit.exec_start == [csr_approval.SCRIPT, csr_approval.CONFIG]
    assert FETCH_UNIT in unit.get("Unit", "After")[0].split()
    assert unit.get("Service", "Restart") == ["always"]


def test_the_approvers_rbac_is_exactly_read_requests_and_nodes_and_approve_for_its_two_signers():
    objects = cluster_objects.cluster_objects(parsed("prod"))
    user = pki.CSR_APPROVER_USER
    bindings = [o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    granted = [b for b in bindings if any(s["name"] == user for s in b["subjects"])]
    assert [(b["kind"], b["roleRef"]["name"], b["subjects"]) for b in granted] == [
        (
            "ClusterRoleBinding",
            cluster_objects.CSR_APPROVER_ROLE,
            [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        )
    ]
    (role,) = [
        o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == granted[0]["roleRef"]["name"]
    ]
    assert role["rules"] == [
        {
            "apiGroups": ["certificates.k8s.io"],
            "resources": ["certificatesigningrequests"],
            "verbs": ["get", "list", "watch"],
        },
        {
            "apiGroups": ["certificates.k8s.io"],
            "resources": ["certificatesigningrequests/approval"],
            "verbs": ["update"],
        },
        {
            "apiGroups": ["certificates.k8s.io"],
            "resources": ["signers"],
            "resourceNames": ["kubernetes.io/kubelet-serving", "kubernetes.io/kube-apiserver-client-kubelet"],
            "verbs": ["approve"],
        },
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
    ]
    # Its certificate puts it in no group: nothing but that binding applies to it.
    (spec,) = [c for c in pki.certificates() if c.common_name == user]
    assert spec.organization is None and not spec.server
