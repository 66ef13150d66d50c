"""An apiserver machine decides its own address and serving certificate at boot: the rendered units read
what the identity program writes, and the shipped program, run against the box's IMDS stand-in, issues a
certificate the cluster CA verifies for exactly the names and addresses clients use."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

import machine as programs
from infra.boot.secrets import FETCH_UNIT
from infra.control_plane import machine_identity, paths, pki
from tests.e2e import imds
from tests.e2e import pki as test_pki
from tests.e2e.plan_machines import parse_unit
from tests.helpers import loopback_server, require_tool
from tests.infra.control_plane_files import files, machines, spec

MACHINE_ADDRESS = "10.0.0.77"  # what the stand-in IMDS says this machine's address is


def _unit(name: str):
    return parse_unit(name, files(machines("prod")[0])[f"/etc/systemd/system/{name}"])


@pytest.mark.parametrize("name", paths.COMPONENT_UNITS)
def test_every_component_reads_the_address_the_identity_unit_writes(name):
    """The flags name ``${MACHINE_ADDRESS}``; systemd fills it from the EnvironmentFile the identity program
    writes, which runs first. A component that named another file or variable would start with the literal
    text as its address (or with none)."""
    config = json.loads(files(machines("prod")[0])[machine_identity.CONFIG])
    unit = _unit(name)
    assert unit.get("Service", "EnvironmentFile") == [config["environment_file"]]
    assert f"${{{config['variable']}}}" in " ".join(unit.exec_start)
    assert machine_identity.UNIT in unit.get("Unit", "After")[0].split()
    assert machine_identity.UNIT in unit.get("Unit", "Wants")[0].split()


def test_the_identity_unit_runs_after_the_secrets_it_signs_with_and_again_on_failure():
    unit = _unit(machine_identity.UNIT)
    assert unit.exec_start == [machine_identity.SCRIPT, machine_identity.CONFIG]
    assert FETCH_UNIT in unit.get("Unit", "After")[0].split()
    assert unit.get("Service", "Type") == ["oneshot"] and unit.get("Service", "Restart") == ["on-failure"]
    config = json.loads(files(machines("prod")[0])[machine_identity.CONFIG])
    fetched = {f.path for f in pki.apiserver_secret_files(pki.certificates())}
    assert {config["ca_cert"], config["ca_key"]} <= fetched
    assert {config["cert"], config["key"]}.isdisjoint(fetched)  # issued here, never fetched


class _Imds(imds.Handler):
    def machine_address(self) -> str:
        return MACHINE_ADDRESS

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def metadata_service():
    with loopback_server(_Imds) as url:
        yield url


def _run_identity(tmp_path, endpoint: str) -> dict:
    """The shipped program with the rendered settings, its paths moved under ``tmp_path``; a CA issued as
    pulumi-tls issues the cluster CA (tests/e2e/pki.py)."""
    require_tool("openssl")
    tmp_path.mkdir(parents=True, exist_ok=True)
    ca = test_pki.issue("kubernetes-ca", uses=pki.CA_USAGES, hours=pki.CA_VALIDITY_HOURS)
    config = json.loads(machine_identity.identity_config(spec("prod").addresses))
    for key in ("ca_cert", "ca_key", "cert", "key", "environment_file"):
        config[key] = str(tmp_path / config[key].lstrip("/"))
    os.makedirs(os.path.dirname(config["ca_cert"]), exist_ok=True)
    with open(config["ca_cert"], "w") as handle:
        handle.write(ca.cert_pem)
    with open(config["ca_key"], "w") as handle:
        handle.write(ca.key_pem)
    (tmp_path / "identity.json").write_text(json.dumps(config))
    _run_program(tmp_path / "identity.json", endpoint)
    return {"config": config, "ca": ca}


def _run_program(config_path, endpoint: str) -> None:
    """The shipped program on ``config_path``, asking the metadata service at ``endpoint``; it must succeed."""
    done = subprocess.run(
        [sys.executable, str(programs.path("control_plane/serving_identity.py")), str(config_path)],
        env={**os.environ, "IMDS_ENDPOINT": endpoint},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_the_program_issues_a_serving_certificate_for_its_own_address_signed_by_the_cluster_ca(
    tmp_path, metadata_service
):
    issued = _run_identity(tmp_path, metadata_service)
    config, ca = issued["config"], issued["ca"]
    addresses = spec("prod").addresses
    with open(config["cert"], "rb") as handle:
        certificate = x509.load_pem_x509_certificate(handle.read())
    certificate.verify_directly_issued_by(ca.cert)
    sans = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)} == {
        MACHINE_ADDRESS,
        addresses.apiserver_lb_ip(),
        addresses.kubernetes_service_ip,
        "127.0.0.1",
    }
    assert set(sans.get_values_for_type(x509.DNSName)) == {
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
        "localhost",
    }
    usages = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    lifetime = certificate.not_valid_after_utc - certificate.not_valid_before_utc
    assert lifetime.days == machine_identity.VALIDITY_DAYS
    with open(config["key"], "rb") as handle:
        key = serialization.load_pem_private_key(handle.read(), None)
    assert key.public_key() == certificate.public_key()
    # CIS 1.1.20 / 1.1.21: certificates 0644, keys 0600.
    assert oct(os.stat(config["cert"]).st_mode & 0o777) == "0o644"
    assert oct(os.stat(config["key"]).st_mode & 0o777) == "0o600"
    with open(config["environment_file"]) as handle:
        assert handle.read() == f"{machine_identity.ADDRESS_VARIABLE}={MACHINE_ADDRESS}\n"


@pytest.mark.slow
def test_each_run_issues_a_new_key(tmp_path, metadata_service):
    """No serving key outlives the boot (or gate re-run) that issued it."""
    first = _run_identity(tmp_path / "a", metadata_service)["config"]
    with open(first["key"]) as handle:
        key = handle.read()
    _run_program(tmp_path / "a/identity.json", metadata_service)
    with open(first["key"]) as handle:
        assert handle.read() != key


@pytest.mark.slow
def test_the_program_fails_when_the_metadata_service_does_not_answer(tmp_path):
    """Then the unit fails (and Restart= tries again) and no component starts with a made-up address."""
    require_tool("openssl")
    config = json.loads(machine_identity.identity_config(spec("prod").addresses))
    config["environment_file"] = str(tmp_path / "machine.env")
    (tmp_path / "identity.json").write_text(json.dumps(config))
    source = programs.path("control_plane/serving_identity.py").read_text().replace("ATTEMPTS = 30", "ATTEMPTS = 1")
    (tmp_path / "identity.py").write_text(source)
    done = subprocess.run(
        [sys.executable, str(tmp_path / "identity.py"), str(tmp_path / "identity.json")],
        env={**os.environ, "IMDS_ENDPOINT": "http://127.0.0.1:9"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "no address from the metadata service" in done.stderr
    assert not (tmp_path / "machine.env").exists()
