"""The node's join program (``machine/node/node_join.py``) when the apiserver refuses its bootstrap token: it reads
Key Vault again with the boot's own fetch, and joins with the token it then finds, without a restart. Run for real
against a loopback stand-in for IMDS and the apiserver (plain HTTP: what is checked here is the program's loop, not
TLS); the refusal itself, the real apiserver's answer to an expired token, is in tests/e2e/test_node_labels.py."""

from __future__ import annotations

import base64
import datetime
import json
import shlex
import ssl
import time
import types
from http.server import BaseHTTPRequestHandler

from infra.boot.secrets import FETCH_SCRIPT_PATH
from infra.node import join
from tests.helpers import load_program, loopback_server, require_tool
from tests.infra.test_node_bootstrap import files, spec

OLD, NEW = "abcdef.0123456789abcdef", "ghijkl.0123456789ghijkl"


def _certificate() -> bytes:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "box")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=30))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def _any_ca_file() -> str:
    """The program loads a CA file; plain HTTP never uses it."""
    return ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt"


def test_a_refused_token_is_read_from_key_vault_again_and_the_node_joins_with_the_new_one(tmp_path, monkeypatch):
    require_tool("openssl")
    sent: list[str] = []
    issued = base64.b64encode(_certificate()).decode()

    class Apiserver(BaseHTTPRequestHandler):
        def log_message(self, *args):
            return

        def _json(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802 - http.server's name
            if self.path.startswith("/metadata/attested"):
                self._json(200, {"signature": "document"})
            elif self.path.startswith("/metadata/instance"):
                self._json(200, {"resourceId": "/subscriptions/s/resourceGroups/g/providers/x/virtualMachines/0"})
            else:  # the CSR, issued
                self._json(200, {"status": {"certificate": issued}})

        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            token = self.headers["Authorization"].removeprefix("Bearer ")
            sent.append(token)
            self._json(401 if token == OLD else 201, {})

    token_file, fetched = tmp_path / "bootstrap-token", tmp_path / "fetched"
    token_file.write_text(OLD + "\n")
    fetch = f"echo {NEW} > {shlex.quote(str(token_file))}; echo once >> {shlex.quote(str(fetched))}"
    config = json.loads(join.join_config("unused"))
    program = load_program("node/node_join.py")
    pauses: list[float] = []

    def pause(seconds: float) -> None:  # the loop's 10-s pause, not waited here; bounded
        pauses.append(seconds)
        if len(pauses) > 3:
            raise RuntimeError(f"still not joined after {len(pauses)} attempts: tokens sent {sent}")

    monkeypatch.setattr(program, "time", types.SimpleNamespace(**{**vars(time), "sleep": pause}))
    with loopback_server(Apiserver) as url:
        config.update(
            server=url,
            imds=url,
            ca_cert=_any_ca_file(),
            token_file=str(token_file),
            cert_dir=str(tmp_path / "pki"),
            kubeconfig=str(tmp_path / "kubelet.conf"),
            refetch_command=["sh", "-c", fetch],
        )
        settings = tmp_path / "node-join.json"
        settings.write_text(json.dumps(config))
        assert program.main(str(settings)) == 0
    assert sent == [OLD, NEW]
    assert fetched.read_text() == "once\n"
    assert (tmp_path / "pki" / config["current_name"]).read_bytes().startswith(b"-----BEGIN CERTIFICATE-----")


def test_the_refetch_is_the_nodes_boot_fetch_which_writes_the_token_the_program_reads():
    config = json.loads(join.join_config("https://10.0.0.68:6443"))
    assert config["refetch_command"] == [FETCH_SCRIPT_PATH]
    node_files = files(spec())
    fetch = node_files[FETCH_SCRIPT_PATH]
    assert f"fetch node-bootstrap-token {config['token_file']} 0600" in fetch
    assert json.loads(node_files[join.CONFIG]) == config
    assert config["refetch_seconds"] >= 60  # a pool's worth of nodes may be refused at once
