"""Kubelet serving certificates: the approver's decision, the files and unit every apiserver receives, and the
RBAC it runs with. What a certificate may name is Azure's word on the Node's VM (its providerID, its computer name,
its NICs' primary addresses), not the addresses the Node reports. Against the real apiserver and kubelets:
tests/e2e/test_node_metrics.py."""

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
from infra.config import naming
from infra.config.sizing import shards
from infra.control_plane import cluster_objects, csr_approval, pki
from infra.node import kubelet
from tests.e2e import imds
from tests.e2e.plan_machines import parse_unit
from tests.helpers import parsed
from tests.infra.control_plane_files import approver_program, files, machines

PROD = parsed("prod")
MACHINES = csr_approval.node_machines(PROD)
SHARD = shards(PROD.node_pools[0])[0].name
NODE = f"{naming.computer_name_prefix(SHARD)}000003"
NODE_VM = (
    f"/subscriptions/{imds.SUBSCRIPTION}/resourceGroups/{naming.node_resource_group(PROD.cluster_name)}"
    f"/providers/Microsoft.Compute/virtualMachineScaleSets/{naming.scale_set(PROD.cluster_name, SHARD)}"
    "/virtualMachines/3"
)
NAT_HOST = naming.nat_host(PROD.cluster_name, 0)
NAT_VM = (
    f"/subscriptions/{imds.SUBSCRIPTION}/resourceGroups/{naming.resource_group(PROD.cluster_name)}"
    f"/providers/Microsoft.Compute/virtualMachines/{NAT_HOST}"
)
NODE_IP = "10.1.0.7"
POD_IP = "10.1.0.9"  # a secondary IP configuration of the node's NIC: a pod's address
OTHER_NODE_IP = "10.1.0.8"
SERVING_USAGES = ["digital signature", "key encipherment", "server auth"]


def _nic(primary: str, *secondaries: str) -> dict:
    """A NIC as Resource Manager answers it: its IP configurations, the first the primary."""
    addresses = [(primary, True), *((a, False) for a in secondaries)]
    return {
        "properties": {
            "ipConfigurations": [
                {"name": f"ip{i}", "properties": {"privateIPAddress": a, "primary": p}}
                for i, (a, p) in enumerate(addresses)
            ]
        }
    }


class FakeAzure:
    """Resource Manager's records: VMs by resource ID, and the NICs it answers for a scale set's instance (listed
    under it) or a VM (by the IDs its network profile names)."""

    def __init__(self, vms: dict | None = None, nics: dict | None = None):
        self.vms = vms if vms is not None else {NODE_VM: _vm(NODE)}
        self.nic_records = nics if nics is not None else {NODE_VM: [_nic(NODE_IP, POD_IP)]}
        self.asked: list[str] = []

    def subscription(self):
        return imds.SUBSCRIPTION

    def vm(self, resource_id):
        self.asked.append(resource_id)
        return self.vms.get(resource_id)

    def nics(self, vm):
        return self.nic_records[vm["id"]]


def _vm(computer_name: str) -> dict:
    return {"properties": {"osProfile": {"computerName": computer_name}}}


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


def _node(*addresses: tuple[str, str], name: str = NODE, provider: str = f"azure://{NODE_VM}") -> dict:
    """A Node as its kubelet registers it: the addresses it reports and the providerID it writes."""
    registered = addresses or (("InternalIP", NODE_IP), ("Hostname", name))
    return {
        "metadata": {"name": name},
        "spec": {"providerID": provider} if provider else {},
        "status": {"addresses": [{"type": t, "address": a} for t, a in registered]},
    }


def _decide(approver, csr, node, azure=None):
    return approver.decide(csr, node, azure or FakeAzure(), MACHINES)


def test_a_request_for_the_vms_own_name_and_address_is_approved(approver):
    verdict, reason = _decide(approver, _csr(), _node())
    assert verdict == approver.Verdict.APPROVE, reason


def test_a_nat_hosts_request_is_approved_for_its_vms_nic(approver):
    """A NAT host is a VM, not a scale set's instance: its NICs are the ones its network profile names."""
    csr = _csr(_request(common_name=f"system:node:{NAT_HOST}", dns=(NAT_HOST,)), user=f"system:node:{NAT_HOST}")
    azure = FakeAzure({NAT_VM: _vm(NAT_HOST)}, {NAT_VM: [_nic(NODE_IP)]})
    verdict, reason = _decide(approver, csr, _node(name=NAT_HOST, provider=f"azure://{NAT_VM}"), azure)
    assert verdict == approver.Verdict.APPROVE, reason


def test_a_node_reporting_another_vms_address_in_its_status_gets_no_certificate_for_it(approver):
    """Root on a node writes its Node's status: it reports another node's address and asks for a certificate
    naming it (to serve as that node to the apiserver and Prometheus). Azure's NICs of the Node's VM do not hold
    it: denied, the address named. The old approver took the Node's reported addresses and approved."""
    reported = _node(("InternalIP", NODE_IP), ("InternalIP", OTHER_NODE_IP), ("Hostname", NODE))
    verdict, reason = _decide(approver, _csr(_request(ips=(NODE_IP, OTHER_NODE_IP))), reported)
    assert verdict == approver.Verdict.DENY and OTHER_NODE_IP in reason, reason
    # A DNS name the Node reports is not the VM's computer name: denied too.
    reported = _node(("InternalIP", NODE_IP), ("Hostname", NODE), ("InternalDNS", "kubernetes.default.svc"))
    verdict, reason = _decide(approver, _csr(_request(dns=(NODE, "kubernetes.default.svc"))), reported)
    assert verdict == approver.Verdict.DENY and "kubernetes.default.svc" in reason, reason


def test_a_pods_address_on_the_nodes_nic_is_not_the_nodes_to_serve_as(approver):
    """Azure CNI gives each pod a secondary IP configuration of the node's NIC: only the primary ones count, so a
    node cannot take a certificate for one of its pods' addresses."""
    verdict, reason = _decide(approver, _csr(_request(ips=(NODE_IP, POD_IP))), _node(("InternalIP", POD_IP)))
    assert verdict == approver.Verdict.DENY and POD_IP in reason, reason


@pytest.mark.parametrize(
    ("node", "azure", "why"),
    [
        pytest.param(
            _node(provider=f"azure://{NODE_VM}".replace("/3", "/4")), None, "Azure knows no such VM", id="no-vm"
        ),
        pytest.param(_node(), FakeAzure({NODE_VM: _vm(f"{NODE}x")}), "VM is", id="another-vms-name"),
        pytest.param(
            _node(provider=f"azure://{NAT_VM}x".replace(NAT_HOST, "prod-apiserver")),
            None,
            "no node pool",
            id="not-a-node-vm",
        ),
        pytest.param(_node(provider=NODE_VM), None, "no node pool", id="not-azure"),
    ],
)
def test_a_node_whose_providerid_azure_does_not_confirm_is_denied(approver, node, azure, why):
    """The node wrote its providerID too: it is taken only when it names one of this cluster's node or NAT VMs and
    Azure has that VM under the Node's name."""
    verdict, reason = _decide(approver, _csr(), node, azure)
    assert verdict == approver.Verdict.DENY and why in reason, reason


def test_a_request_for_a_node_that_does_not_exist_or_has_no_providerid_waits(approver):
    verdict, reason = _decide(approver, _csr(), None)
    assert verdict == approver.Verdict.WAIT and NODE in reason
    verdict, reason = _decide(approver, _csr(), _node(provider=""))
    assert verdict == approver.Verdict.WAIT and "providerID" in reason


def test_an_azure_that_does_not_answer_leaves_the_serving_request_pending(approver):
    class Down(FakeAzure):
        def vm(self, resource_id):
            raise OSError("connection refused")

    config = {
        "signer": csr_approval.KUBELET_SERVING_SIGNER,
        "client_signer": "",
        "machines": MACHINES,
        "lease": csr_approval.lease_settings(),
    }
    program = approver.Approver(config)
    program.azure_api = Down()

    class Api:
        def node(self, name):
            return _node()

    verdict, reason, _ = program.verdict(Api(), _csr())
    assert verdict == approver.Verdict.WAIT and "connection refused" in reason, reason


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
    verdict, reason = _decide(approver, csr, _node())
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


def test_the_approvers_rbac_is_exactly_read_requests_and_nodes_approve_for_its_two_signers_and_its_lease():
    objects = cluster_objects.cluster_objects(parsed("prod"))
    user = pki.CSR_APPROVER_USER
    bindings = [o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    granted = [b for b in bindings if any(s["name"] == user for s in b["subjects"])]
    subjects = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
    assert [(b["kind"], b["metadata"].get("namespace"), b["roleRef"]["name"], b["subjects"]) for b in granted] == [
        ("ClusterRoleBinding", None, cluster_objects.CSR_APPROVER_ROLE, subjects),
        ("RoleBinding", "kube-system", cluster_objects.CSR_APPROVER_ROLE, subjects),
    ]
    (role,) = [
        o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == granted[0]["roleRef"]["name"]
    ]
    lease_role_name = ("kube-system", granted[1]["roleRef"]["name"])
    (lease_role,) = [
        o
        for o in objects
        if o["kind"] == "Role" and (o["metadata"]["namespace"], o["metadata"]["name"]) == lease_role_name
    ]
    # Its one Lease, by name: get and update, never create (the Lease is declared with the cluster's objects).
    assert lease_role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [csr_approval.LEASE],
            "verbs": ["get", "update"],
        }
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
