"""Cluster-admin access minted on demand: the deploy's and an operator's, through one path.

The signer (machine/control_plane/sign_client.py) runs for real, with the real openssl, on a CA made here.
Substituted: Azure Run Command. ``run_here`` runs the script ``az vm run-command invoke`` (or ``az vmss
run-command invoke`` on an instance) would carry with bash on this machine, with the CA paths pointed at the
test's CA, and answers in Run Command's JSON; ``az vmss list-instances`` is answered with INSTANCES.
"""

from __future__ import annotations

import base64
import datetime
import json
import re
import stat
import subprocess
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

import machine
from infra.control_plane import access, pki
from plan import credential
from tests.e2e.pki import issue
from tests.helpers import load_yaml

RG, VMS = "c1-rg", ["c1-apiserver-0", "c1-apiserver-1"]
SCALE_SET, INSTANCES = "c1-apiservers", ["3", "7"]  # repairs replace instances: ids are not 0..n-1
SERVER = "https://10.0.0.4:6443"


@pytest.fixture
def ca(tmp_path: Path) -> tuple[Path, Path, x509.Certificate]:
    issued = issue("kubernetes-ca", uses=pki.CA_USAGES, hours=24)
    cert, key = tmp_path / "ca.crt", tmp_path / "ca.key"
    cert.write_text(issued.cert_pem)
    key.write_text(issued.key_pem)
    return cert, key, x509.load_pem_x509_certificate(issued.cert_pem.encode())


def run_here(ca: tuple[Path, Path, x509.Certificate], calls: list[list[str]]):
    cert, key, _ = ca

    def invoke(command: list[str]) -> str:
        calls.append(command)
        if command[:3] == ["az", "vmss", "list-instances"]:
            return json.dumps(INSTANCES)
        script = command[command.index("--scripts") + 1]
        script = script.replace(pki.cert_path(pki.CLUSTER_CA), str(cert)).replace(
            pki.key_path(pki.CLUSTER_CA), str(key)
        )
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
        message = f"Enable succeeded: \n[stdout]\n{done.stdout}\n[stderr]\n{done.stderr}"
        return json.dumps({"value": [{"code": "ProvisioningState/succeeded", "message": message}]})

    return invoke


def _subject(certificate: x509.Certificate) -> dict[str, str]:
    return {attribute.oid._name: attribute.value for attribute in certificate.subject}  # noqa: SLF001


def _check_signed(certificate: x509.Certificate, ca_cert: x509.Certificate, user: str, hours: int) -> None:
    certificate.verify_directly_issued_by(ca_cert)
    assert _subject(certificate) == {"organizationName": pki.SUPERUSER_GROUP, "commonName": user}
    usages = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    now = datetime.datetime.now(datetime.UTC)
    assert now + datetime.timedelta(hours=hours) - datetime.timedelta(minutes=1) < certificate.not_valid_after_utc
    assert certificate.not_valid_after_utc <= now + datetime.timedelta(hours=hours)


def test_an_operator_mints_a_one_hour_break_glass_kubeconfig_and_no_private_key_travels(ca, tmp_path, capsys):
    calls: list[list[str]] = []
    out = tmp_path / "alice.kubeconfig"
    argv = ["break-glass", "--name", "alice", "--server", SERVER, "--resource-group", RG, "--vm", VMS[0]]
    argv += ["--kubeconfig", str(out)]
    credential.main(argv, invoke=run_here(ca, calls))
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    config = load_yaml(out.read_text())
    assert config["clusters"][0]["cluster"]["server"] == SERVER
    user = config["users"][0]["user"]
    certificate = x509.load_pem_x509_certificate(_unb64(user["client-certificate-data"]))
    _check_signed(certificate, ca[2], "break-glass:alice", access.BREAK_GLASS_HOURS)
    key = serialization.load_pem_private_key(_unb64(user["client-key-data"]), None)
    assert key.public_key().public_numbers() == certificate.public_key().public_numbers()
    assert _unb64(config["clusters"][0]["cluster"]["certificate-authority-data"]).decode() == ca[0].read_text()
    # One Run Command on the named VM; what it carried holds the request, never a private key.
    [command] = calls
    assert command[:4] == ["az", "vm", "run-command", "invoke"]
    assert command[command.index("--name") + 1] == VMS[0] and command[command.index("--resource-group") + 1] == RG
    assert "PRIVATE KEY" not in " ".join(command) and "CERTIFICATE REQUEST" in " ".join(command)
    assert "break-glass:alice" in capsys.readouterr().out
    with pytest.raises(FileExistsError):  # never overwrites a file
        credential.main(argv, invoke=run_here(ca, []))


def test_the_deploy_kubeconfig_holds_a_command_not_a_credential_and_the_command_mints_one(ca, capsys):
    document = access.deploy_kubeconfig(SERVER, ca[0].read_text(), RG, SCALE_SET)
    assert not re.search(r"client-key|client-certificate|token|password|PRIVATE KEY", document)
    config = load_yaml(document)
    exec_entry = config["users"][0]["user"]["exec"]
    assert exec_entry["command"] == "python3" and exec_entry["args"][:2] == ["-m", "plan.credential"]
    # What the kubernetes provider runs, run: an ExecCredential client-go accepts.
    calls: list[list[str]] = []
    credential.main(exec_entry["args"][2:], invoke=run_here(ca, calls))
    # The instances are listed at the time (repairs replace them), and the first one signs.
    assert [c[:4] for c in calls] == [
        ["az", "vmss", "list-instances", "--resource-group"],
        ["az", "vmss", "run-command", "invoke"],
    ]
    assert calls[1][calls[1].index("--name") + 1] == SCALE_SET and calls[1][calls[1].index("--instance-id") + 1] == "3"
    answer = json.loads(capsys.readouterr().out)
    assert (answer["apiVersion"], answer["kind"]) == (exec_entry["apiVersion"], "ExecCredential")
    certificate = x509.load_pem_x509_certificate(answer["status"]["clientCertificateData"].encode())
    _check_signed(certificate, ca[2], access.DEPLOY_USER, access.DEPLOY_HOURS)
    expires = datetime.datetime.strptime(answer["status"]["expirationTimestamp"], "%Y-%m-%dT%H:%M:%S%z")
    assert expires == certificate.not_valid_after_utc


def test_the_next_apiserver_signs_when_one_cannot_and_every_refusal_is_named(ca):
    calls: list[list[str]] = []
    signs = run_here(ca, calls)

    def first_down(command: list[str]) -> str:
        if command[command.index("--name") + 1] == VMS[0]:
            calls.append(command)
            raise RuntimeError("(Conflict) Run command extension execution is in progress")
        return signs(command)

    cert, _, _, _ = credential.mint("break-glass:bob", 1, RG, VMS, first_down)
    assert [c[c.index("--name") + 1] for c in calls] == VMS
    _check_signed(x509.load_pem_x509_certificate(cert.encode()), ca[2], "break-glass:bob", 1)
    with pytest.raises(SystemExit, match="c1-apiserver-0: .*Conflict.*; c1-apiserver-1: the apiserver signed nothing"):
        credential.mint("break-glass:bob", 1, RG, VMS, lambda c: first_down(c) if VMS[0] in c else _refused())


def test_on_a_stack_moving_to_the_scale_set_a_retiring_vm_signs_when_no_instance_can(ca):
    calls: list[list[str]] = []
    signs = run_here(ca, calls)
    instances_down = lambda c: _refused() if "--instance-id" in c else signs(c)  # noqa: E731
    cert, _, _, _ = credential.mint("break-glass:bob", 1, RG, VMS[:1], instances_down, [SCALE_SET])
    _check_signed(x509.load_pem_x509_certificate(cert.encode()), ca[2], "break-glass:bob", 1)
    assert calls[-1][:3] == ["az", "vm", "run-command"]
    with pytest.raises(
        SystemExit, match="c1-apiservers instance 3: the apiserver signed nothing.*; c1-apiservers instance 7"
    ):
        credential.mint("break-glass:bob", 1, RG, [], instances_down, [SCALE_SET])


def _refused() -> str:
    message = "Enable succeeded: \n[stdout]\n\n[stderr]\nsign_client: openssl ca failed: unable to load CA private key"
    return json.dumps({"value": [{"message": message}]})


def test_the_signer_forces_the_subject_and_refuses_long_or_odd_requests(ca, tmp_path):
    cert, key, ca_cert = ca
    assert _signer_max_hours() == access.MAX_HOURS
    asking = ec.generate_private_key(ec.SECP256R1())
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(
            x509.Name(
                [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "team-a"), x509.NameAttribute(NameOID.COMMON_NAME, "x")]
            )
        )
        .sign(asking, hashes.SHA256())
        .public_bytes(serialization.Encoding.PEM)
        .decode()
    )
    program = machine.path(access.SIGNER_PROGRAM)

    def sign(user: str, hours: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["python3", str(program), user, str(hours), str(cert), str(key)],
            input=request,
            capture_output=True,
            text=True,
            timeout=30,
        )

    done = sign("break-glass:carol", access.MAX_HOURS)
    assert done.returncode == 0, done.stderr
    signed = x509.load_pem_x509_certificate(done.stdout.encode())
    _check_signed(signed, ca_cert, "break-glass:carol", access.MAX_HOURS)
    assert signed.not_valid_before_utc < datetime.datetime.now(datetime.UTC)  # clock skew between machines
    for user, hours, why in [
        ("break-glass:carol", access.MAX_HOURS + 1, "hours 9 must be 1 to 8"),
        ("break-glass:carol", 0, "hours 0 must be 1 to 8"),
        ("Carol/O=evil", 1, "user 'Carol/O=evil' must match"),
        ("", 1, "user '' must match"),
    ]:
        refused = sign(user, hours)
        assert refused.returncode != 0 and why in refused.stderr and refused.stdout == ""
    assert not any(p.name not in {"ca.crt", "ca.key"} for p in tmp_path.iterdir())  # leaves nothing behind


def _signer_max_hours() -> int:
    match = re.search(r"^MAX_HOURS = (\d+)$", machine.path(access.SIGNER_PROGRAM).read_text(), re.MULTILINE)
    assert match
    return int(match.group(1))


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


def test_the_signing_script_refuses_input_that_would_end_its_heredoc():
    with pytest.raises(ValueError, match="may not appear"):
        access.signing_script("u", 1, "-----BEGIN CERTIFICATE REQUEST-----\nSUPERCLUSTER_END_OF_INPUT\n")
