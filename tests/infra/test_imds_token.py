"""The token helper every boot script uses asks for its own role identity, by resource ID."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, HTTPServer

from infra.boot.secrets import _IMDS_TOKEN_SOURCE


class FakeImds(BaseHTTPRequestHandler):
    requests: list[tuple[str, dict]] = []

    def do_GET(self):  # noqa: N802 - http.server API
        url = urllib.parse.urlparse(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        FakeImds.requests.append((url.path, query))
        if self.headers.get("Metadata") != "true":
            self.send_response(400)
            self.end_headers()
            return
        if url.path == "/metadata/instance/compute":
            body = {"subscriptionId": "sub-1", "resourceGroupName": "prod-rg"}
        else:
            body = {"access_token": f"token-for-{query['msi_res_id'].rsplit('/', 1)[-1]}"}
        payload = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


def test_token_is_requested_for_the_named_role_identity(tmp_path):
    identity = tmp_path / "identity"
    identity.write_text("prod-id-node\n")
    server = HTTPServer(("127.0.0.1", 0), FakeImds)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        env = {
            **os.environ,
            "IMDS_ENDPOINT": f"http://127.0.0.1:{server.server_port}",
            "IDENTITY_FILE": str(identity),
            "IMDS_ATTEMPTS": "1",
        }
        result = subprocess.run(
            [sys.executable, str(_IMDS_TOKEN_SOURCE), "https://vault.azure.net"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        server.shutdown()
        server.server_close()
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "token-for-prod-id-node"
    path, query = FakeImds.requests[-1]
    assert path == "/metadata/identity/oauth2/token"
    assert query["resource"] == "https://vault.azure.net"
    assert query["msi_res_id"] == (
        "/subscriptions/sub-1/resourceGroups/prod-rg/providers/"
        "Microsoft.ManagedIdentity/userAssignedIdentities/prod-id-node"
    )


def test_every_machine_names_its_role_identity(dev_plan):
    from plan.artifacts import collect_files

    files = collect_files(dev_plan.registrations)
    identities = {
        path.split("/")[0]: text.strip() for path, text in files.items() if path.endswith("etc/supercluster/identity")
    }
    assert identities, "every VM and scale set names its identity"
    for machine, identity in identities.items():
        role = identity.removeprefix("dev-id-")
        assert role in {"etcd", "events-etcd", "apiserver", "node", "nat"}, (machine, identity)
