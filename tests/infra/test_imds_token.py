"""The token helper every boot script uses asks for its own role identity, by resource ID."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, HTTPServer

from infra.boot.secrets import _IMDS_TOKEN_SOURCE
from infra.config import naming
from tests.helpers import json_reply


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
            # A node scale set's VM: in the node resource group, its identity in the cluster's.
            body = {"subscriptionId": "sub-1", "resourceGroupName": "prod-nodes-rg"}
        else:
            body = {"access_token": f"token-for-{query['msi_res_id'].rsplit('/', 1)[-1]}"}
        json_reply(self, 200, body)

    def log_message(self, *args):
        pass


def test_token_is_requested_for_the_named_role_identity(tmp_path):
    identity = tmp_path / "identity"
    identity.write_text(naming.role_identity_below_subscription("prod", "node") + "\n")
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


def test_every_machine_asks_imds_for_an_identity_it_carries(dev_plan):
    """What each VM and scale set's token helper asks IMDS for (its identity file, with the subscription and
    resource group IMDS reports for that machine) is one of the identities the plan attaches to it: IMDS answers
    400 for any other, and the machine never gets its secrets."""
    from plan.artifacts import collect_files
    from plan.mocks import MOCK_SUBSCRIPTION

    files = collect_files(dev_plan.registrations)
    helper = runpy.run_path(str(_IMDS_TOKEN_SOURCE))
    machines = [
        r
        for r in dev_plan.registrations
        if r.type in ("azure-native:compute:VirtualMachine", "azure-native:compute:VirtualMachineScaleSet")
    ]
    assert {r.inputs["resourceGroupName"] for r in machines} == {"dev-rg", "dev-nodes-rg"}
    for machine in machines:
        (identity_file,) = [text for path, text in files.items() if path == f"{machine.name}/etc/supercluster/identity"]
        compute = {"subscriptionId": MOCK_SUBSCRIPTION, "resourceGroupName": machine.inputs["resourceGroupName"]}
        asked = _asked_for(helper, identity_file, compute)
        # The plan's mock IDs spell the type's plural by rule (".../userAssignedIdentitys/..."); Azure's is
        # userAssignedIdentities: compared by group and name.
        carried = {_group_and_name(i) for i in machine.inputs["identity"]["userAssignedIdentities"]}
        assert asked.startswith(f"/subscriptions/{MOCK_SUBSCRIPTION}/resourceGroups/"), asked
        assert "/providers/Microsoft.ManagedIdentity/userAssignedIdentities/" in asked, asked
        assert _group_and_name(asked) in carried, (machine.name, asked, carried)


def _asked_for(helper: dict, identity_text: str, compute: dict) -> str:
    """``identity_resource_id`` of the helper as the machine runs it, its file and IMDS's answer given."""
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix="-identity") as handle:
        handle.write(identity_text)
        handle.flush()
        function = helper["identity_resource_id"]
        function.__globals__["IDENTITY_FILE"] = handle.name
        function.__globals__["get"] = lambda path, query: compute
        return function()


def _group_and_name(resource_id: str) -> tuple[str, str]:
    parts = resource_id.split("/")
    return parts[parts.index("resourceGroups") + 1], parts[-1]
