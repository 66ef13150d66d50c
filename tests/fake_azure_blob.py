"""A local stand-in for the two Azure endpoints the etcd member tool talks to.

It answers the instance metadata service's token request and the Blob REST calls the tool
makes (Put Block, Put Block List, List Blobs, Get Blob), and it checks what Azure would check:
the bearer token, the API version header, each block's Content-MD5, and ``If-None-Match: *``.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import json
import threading
import time
import urllib.parse
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN = "fake-storage-token"


@dataclass
class StoredBlob:
    data: bytes
    metadata: dict[str, str]
    last_modified: float = field(default_factory=time.time)  # Unix time; listed as Last-Modified


@dataclass
class FakeBlobService:
    container: str
    blobs: dict[str, StoredBlob] = field(default_factory=dict)
    staged: dict[tuple[str, str], bytes] = field(default_factory=dict)
    page_size: int = 5000  # List Blobs returns at most 5,000 names per page
    token_requests: int = 0
    rejected: list[str] = field(default_factory=list)
    # Uploads whose x-ms-meta-member is listed here fail with 403, as a member without its role would.
    refuse_uploads_from: set[str] = field(default_factory=set)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def imds_token_url(self) -> str:
        return (
            f"{self.url}/metadata/identity/oauth2/token?api-version=2018-02-01&resource="
            "https%3A%2F%2Fstorage.azure.com%2F"
        )

    def start(self) -> FakeBlobService:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output quiet
                return

            def _reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _authorized(self) -> bool:
                ok = (
                    self.headers.get("Authorization") == f"Bearer {TOKEN}"
                    and self.headers.get("x-ms-version") is not None
                )
                if not ok:
                    service.rejected.append(f"{self.command} {self.path}: not authorized")
                    self._reply(403)
                return ok

            def do_GET(self) -> None:  # noqa: N802 - http.server API
                url = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(url.query))
                if url.path == "/metadata/identity/oauth2/token":
                    if self.headers.get("Metadata") != "true" or query.get("resource") != "https://storage.azure.com/":
                        self._reply(400)
                        return
                    service.token_requests += 1
                    self._reply(200, json.dumps({"access_token": TOKEN, "token_type": "Bearer"}).encode())
                    return
                if not self._authorized():
                    return
                parts = url.path.strip("/").split("/", 1)
                if parts[0] != service.container:
                    self._reply(404)
                    return
                if len(parts) == 1 and query.get("comp") == "list" and query.get("restype") == "container":
                    self._reply(200, service._listing(query))
                    return
                blob = service.blobs.get(urllib.parse.unquote(parts[1])) if len(parts) == 2 else None
                if blob is None:
                    self._reply(404)
                    return
                self._reply(200, blob.data, {f"x-ms-meta-{k}": v for k, v in blob.metadata.items()})

            def do_PUT(self) -> None:  # noqa: N802 - http.server API
                if not self._authorized():
                    return
                url = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(url.query))
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                container, name = url.path.strip("/").split("/", 1)
                if container != service.container:
                    self._reply(404)
                    return
                if query.get("comp") == "block":
                    expected = self.headers.get("Content-MD5")
                    if expected != base64.b64encode(hashlib.md5(body).digest()).decode():
                        service.rejected.append(f"block of {name}: Content-MD5 mismatch")
                        self._reply(400)
                        return
                    service.staged[(name, query["blockid"])] = body
                    self._reply(201)
                    return
                if query.get("comp") == "blocklist":
                    if self.headers.get("x-ms-meta-member") in service.refuse_uploads_from:
                        service.rejected.append(f"{name}: upload refused")
                        self._reply(403)
                        return
                    if self.headers.get("If-None-Match") == "*" and name in service.blobs:
                        service.rejected.append(f"{name}: already exists")
                        self._reply(409)
                        return
                    ids = [node.text for node in ElementTree.fromstring(body).iterfind("Latest")]
                    data = b"".join(service.staged.pop((name, block_id)) for block_id in ids)
                    metadata = {
                        key[len("x-ms-meta-") :].lower(): value
                        for key, value in self.headers.items()
                        if key.lower().startswith("x-ms-meta-")
                    }
                    service.blobs[name] = StoredBlob(data, metadata)
                    self._reply(201)
                    return
                self._reply(400)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def _listing(self, query: dict[str, str]) -> bytes:
        names = sorted(name for name in self.blobs if name.startswith(query.get("prefix", "")))
        start = names.index(query["marker"]) if query.get("marker") in names else 0
        limit = min(int(query.get("maxresults", self.page_size)), self.page_size)
        page, rest = names[start : start + limit], names[start + limit :]
        root = ElementTree.Element("EnumerationResults")
        blobs = ElementTree.SubElement(root, "Blobs")
        for name in page:
            blob = ElementTree.SubElement(blobs, "Blob")
            ElementTree.SubElement(blob, "Name").text = name
            properties = ElementTree.SubElement(blob, "Properties")
            ElementTree.SubElement(properties, "Last-Modified").text = email.utils.formatdate(
                self.blobs[name].last_modified, usegmt=True
            )
        ElementTree.SubElement(root, "NextMarker").text = rest[0] if rest else ""
        return ElementTree.tostring(root, xml_declaration=True, encoding="utf-8")
