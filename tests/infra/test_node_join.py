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
from pathlib import Path

from infra.boot import secrets
from infra.boot.secrets import FETCH_SCRIPT_PATH
from infra.node import join
from tests.helpers import json_reply, load_program, loopback_server, require_tool
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


def _apiserver(sent: list[str]) -> type[BaseHTTPRequestHandler]:
    """IMDS and the apiserver on one loopback port: the CSR sent with ``OLD`` is refused (401), with any other token
    created and at once issued; each token sent is appended to ``sent``."""
    issued = base64.b64encode(_certificate()).decode()

    class Apiserver(BaseHTTPRequestHandler):
        def log_message(self, *args):
            return

        def _json(self, code: int, body: dict) -> None:
            json_reply(self, code, body)

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

    return Apiserver


def _join(tmp_path, monkeypatch, sent: list[str], fetch: str, attempts: int, **settings) -> dict:
    """The program's ``main`` against the loopback stand-ins, its token file holding ``OLD`` and its re-read the
    shell command ``fetch``; its 10-s pauses are not waited, but its clock moves on by them; more than ``attempts``
    fails. Returns its settings."""
    require_tool("openssl")
    (tmp_path / "bootstrap-token").write_text(OLD + "\n")
    config = json.loads(join.join_config("unused"))
    program = load_program("node/node_join.py")
    pauses: list[float] = []

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) > attempts:
            raise RuntimeError(f"still not joined after {len(pauses)} attempts: tokens sent {sent}")

    def clock() -> float:
        return time.monotonic() + sum(pauses)

    monkeypatch.setattr(program, "time", types.SimpleNamespace(**{**vars(time), "sleep": pause, "monotonic": clock}))
    with loopback_server(_apiserver(sent)) as url:
        config.update(
            server=url,
            imds=url,
            ca_cert=_any_ca_file(),
            token_file=str(tmp_path / "bootstrap-token"),
            cert_dir=str(tmp_path / "pki"),
            kubeconfig=str(tmp_path / "kubelet.conf"),
            refetch_command=["sh", "-c", fetch],
            **settings,
        )
        path = tmp_path / "node-join.json"
        path.write_text(json.dumps(config))
        assert program.main(str(path)) == 0
    assert (tmp_path / "pki" / config["current_name"]).read_bytes().startswith(b"-----BEGIN CERTIFICATE-----")
    return config


def _writes_new(tmp_path) -> str:
    """A fetch that writes ``NEW`` into the token file and counts its runs in ``fetched``."""
    token_file, fetched = (shlex.quote(str(tmp_path / name)) for name in ("bootstrap-token", "fetched"))
    return f"echo {NEW} > {token_file}; echo once >> {fetched}"


def test_a_refused_token_is_read_from_key_vault_again_and_the_node_joins_with_the_new_one(tmp_path, monkeypatch):
    sent: list[str] = []
    _join(tmp_path, monkeypatch, sent, _writes_new(tmp_path), attempts=3)
    assert sent == [OLD, NEW]
    assert (tmp_path / "fetched").read_text() == "once\n"


def test_a_fetch_that_hangs_is_stopped_at_its_timeout_and_read_again_at_the_interval(tmp_path, monkeypatch):
    """The first re-read never ends (its read, a child of the script, waits): it is stopped with that read after
    ``refetch_timeout_seconds`` (1 s here), not after the interval between re-reads (30 s), and the program keeps
    asking; the next re-read, an interval later, finds the new token."""
    sent: list[str] = []
    hung, child = (shlex.quote(str(tmp_path / name)) for name in ("hung", "child"))
    fetch = f"if [ ! -e {hung} ]; then touch {hung}; sleep 30 & echo $! > {child}; wait; fi; {_writes_new(tmp_path)}"
    started = time.monotonic()
    config = _join(tmp_path, monkeypatch, sent, fetch, attempts=6, refetch_seconds=30, refetch_timeout_seconds=1)
    assert time.monotonic() - started < 10, "the hung fetch was not stopped at its timeout"
    state = Path(f"/proc/{(tmp_path / 'child').read_text().strip()}/status")
    assert not state.exists() or "\nState:\tZ" in state.read_text(), "the hung fetch's read was left running"
    assert sent == [OLD] * (config["refetch_seconds"] // 10 + 1) + [NEW]  # a re-read an interval after the first
    assert (tmp_path / "fetched").read_text() == "once\n"


def test_the_refetch_is_the_nodes_boot_fetch_which_writes_the_token_the_program_reads():
    config = json.loads(join.join_config("https://10.0.0.68:6443"))
    assert config["refetch_command"] == [FETCH_SCRIPT_PATH]
    node_files = files(spec())
    fetch = node_files[FETCH_SCRIPT_PATH]
    assert f"fetch node-bootstrap-token {config['token_file']} 0600" in fetch
    assert json.loads(node_files[join.CONFIG]) == config
    assert config["refetch_seconds"] >= 60  # a pool's worth of nodes may be refused at once
    # A re-read outlasts the fetch's own retries of one secret, and is stopped well before the next is due.
    retries = secrets.FETCH_RETRIES * secrets.FETCH_RETRY_DELAY_SECONDS
    assert retries < config["refetch_timeout_seconds"] < config["refetch_seconds"]
    assert f"--retry {secrets.FETCH_RETRIES} --retry-delay {secrets.FETCH_RETRY_DELAY_SECONDS} " in fetch
