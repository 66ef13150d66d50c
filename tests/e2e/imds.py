"""The cluster in a box's stand-in for Azure's instance metadata service (IMDS) at its platform address.

It answers the requests the machines' rendered scripts make: the VM's compute metadata (its
subscription and resource group, from which ``machine/shared/imds_token.py`` builds its role
identity's resource ID), a managed-identity access token, and the network metadata an apiserver
reads its own address from at boot (``machine/control_plane/serving_identity.py``). As IMDS answers
each VM about itself, the network answer is the requester's own address: the source address of the
request, which on the box's switch is the address the host holds. Like IMDS it refuses a request
without the ``Metadata: true`` header (learn.microsoft.com/azure/virtual-machines/instance-metadata-service,
"Security and authentication") and answers nothing else. The token is a fixed stand-in: nothing in
the box checks it. Without an answer, kubelet's run of the image credential provider waits out its
one-minute exec deadline on every pod start (docs/cluster-in-a-box.md).

Run on the box's IMDS host: ``python imds.py ADDRESS PORT`` (``infra.node.cni.IMDS_IP`` and ``IMDS_PORT``).
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlparse

SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"  # a stand-in: no Azure subscription here
RESOURCE_GROUP = "cluster-in-a-box"
ACCESS_TOKEN = "cluster-in-a-box-imds-token"  # a stand-in, never a credential
ANSWERS = {
    "/metadata/instance/compute": {"subscriptionId": SUBSCRIPTION, "resourceGroupName": RESOURCE_GROUP},
    "/metadata/identity/oauth2/token": {"access_token": ACCESS_TOKEN, "token_type": "Bearer"},
}


NETWORK = "/metadata/instance/network"


class Handler(BaseHTTPRequestHandler):
    def machine_address(self) -> str:
        """The address of the machine asking (a test may stand in another)."""
        return self.client_address[0]

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = urlparse(self.path).path
        answer = ANSWERS.get(path) or (self._network() if path == NETWORK else None)
        if self.headers.get("Metadata") != "true":
            self._reply(400, {"error": "bad_request", "error_description": "Required metadata header not specified"})
        elif answer is None:
            self._reply(404, {"error": "not_found"})
        else:
            self._reply(200, answer)

    def _network(self) -> dict[str, Any]:
        """The primary NIC's primary address, in IMDS's shape (interface / ipv4 / ipAddress)."""
        address = {"privateIpAddress": self.machine_address(), "publicIpAddress": ""}
        return {"interface": [{"ipv4": {"ipAddress": [address], "subnet": []}, "ipv6": {"ipAddress": []}}]}

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


if __name__ == "__main__":
    ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), Handler).serve_forever()
