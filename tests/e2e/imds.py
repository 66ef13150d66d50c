"""The cluster in a box's stand-in for Azure's instance metadata service (IMDS) at its platform address.

It answers the two requests a node's rendered scripts make (``machine/shared/imds_token.py``): the
VM's compute metadata (its subscription and resource group, from which the script builds its
role identity's resource ID) and a managed-identity access token. Like IMDS it refuses a request
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
from urllib.parse import urlparse

SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"  # a stand-in: no Azure subscription here
RESOURCE_GROUP = "cluster-in-a-box"
ACCESS_TOKEN = "cluster-in-a-box-imds-token"  # a stand-in, never a credential
ANSWERS = {
    "/metadata/instance/compute": {"subscriptionId": SUBSCRIPTION, "resourceGroupName": RESOURCE_GROUP},
    "/metadata/identity/oauth2/token": {"access_token": ACCESS_TOKEN, "token_type": "Bearer"},
}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        answer = ANSWERS.get(urlparse(self.path).path)
        if self.headers.get("Metadata") != "true":
            self._reply(400, {"error": "bad_request", "error_description": "Required metadata header not specified"})
        elif answer is None:
            self._reply(404, {"error": "not_found"})
        else:
            self._reply(200, answer)

    def _reply(self, status: int, body: dict[str, str]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


if __name__ == "__main__":
    ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), Handler).serve_forever()
