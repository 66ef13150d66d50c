"""The cluster in a box's stand-in for Microsoft Entra ID's v2.0 issuer: its OpenID discovery document and its
signing keys, over HTTPS, on an apiserver machine's own loopback.

The box has no internet, so the apiserver's ``jwt`` authenticator cannot reach login.microsoftonline.com. This
serves, from a folder the test writes: ``openid-configuration.json`` at any path ending in
``/.well-known/openid-configuration`` (its ``issuer`` is Entra's issuer URL for the tenant, so tokens carry the
real ``iss``; its ``jwks_uri`` points back here) and ``keys.json`` at ``/discovery/v2.0/keys`` (Entra's own path
for the tenant's JWKS, learn.microsoft.com/entra/identity-platform/v2-protocols-oidc), with ``cert.pem``/``key.pem``
from the test's own CA. Anything else is 404. Run on the apiserver's host, with the project on ``PYTHONPATH`` (it
imports tests/helpers.py): ``python entra_issuer.py ADDRESS PORT FOLDER``.
"""

from __future__ import annotations

import json
import ssl
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.helpers import json_reply

DISCOVERY_SUFFIX = "/.well-known/openid-configuration"
KEYS_PATH = "/discovery/v2.0/keys"


def handler_for(folder: Path) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = self.path.split("?", 1)[0]
            name = (
                "openid-configuration.json"
                if path.endswith(DISCOVERY_SUFFIX)
                else "keys.json"
                if path.endswith(KEYS_PATH)
                else None
            )
            if name is None:
                self.send_error(404)
                return
            json_reply(self, 200, json.loads((folder / name).read_text()))

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's name
            sys.stdout.write(f"{self.address_string()} {format % args}\n")
            sys.stdout.flush()

    return Handler


def main(address: str, port: str, folder: str) -> None:
    root = Path(folder)
    server = ThreadingHTTPServer((address, int(port)), handler_for(root))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(root / "cert.pem", root / "key.pem")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    print(f"serving {root} on https://{address}:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(*sys.argv[1:4])
