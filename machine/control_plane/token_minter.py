#!/usr/bin/python3
"""supercluster: mints the nodes' next bootstrap token before the last one expires, and puts it in Key Vault.

Every apiserver runs a copy; the one whose claim of the Lease the apiserver takes mints (a token that expires
``lifetime_seconds`` later, once the last is ``period_seconds`` old). Every copy serves, on its machine's own
address, when the token in Key Vault was minted, as the Lease says (plain HTTP ``/metrics``, no secret), so
monitoring sees a minter that stopped. Why, and its rights: infra/control_plane/token_minting.py.
Usage: supercluster-token-minter CONFIG_JSON   (rendered by infra/control_plane/token_minting.py)
"""

import datetime
import http.server
import json
import os
import secrets
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

TIMEOUT = 30
RETRY = 10  # after an error


def rfc3339(moment):
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def epoch(text):
    """Unix time of an RFC 3339 time or a MicroTime (UTC), to the second; None if unreadable."""
    try:
        moment = datetime.datetime.strptime(str(text)[:19], "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None
    return moment.replace(tzinfo=datetime.timezone.utc).timestamp()


def seconds_since(text, now):
    """Seconds from ``text`` (``epoch``'s) to ``now``; None if unreadable."""
    then = epoch(text)
    return None if then is None else now.timestamp() - then


def metrics_text(name, minted):
    """Prometheus text format; no sample while the mint time is unknown (no Lease read yet, or never minted),
    so an alert on its absence fires as well as one on its age."""
    lines = [f"# HELP {name} Unix time the bootstrap token in Key Vault was minted.", f"# TYPE {name} gauge"]
    if minted is not None:
        lines.append(f"{name} {minted:.0f}")
    return "\n".join(lines) + "\n"


def own_address(metrics):
    """The machine's address, from the file its identity unit writes (``NAME=value`` lines)."""
    with open(metrics["address_file"]) as handle:
        for line in handle:
            key, _, value = line.strip().partition("=")
            if key == metrics["address_variable"] and value:
                return value
    raise ValueError(f"no {metrics['address_variable']} in {metrics['address_file']}")


def new_token(config):
    alphabet = config["token_alphabet"]
    return tuple("".join(secrets.choice(alphabet) for _ in range(n)) for n in config["token_lengths"])


def token_secret(config, token_id, token_value, now):
    expires = now + datetime.timedelta(seconds=config["lifetime_seconds"])
    data = {**config["token_data"], "token-id": token_id, "token-secret": token_value, "expiration": rfc3339(expires)}
    metadata = {"name": f"bootstrap-token-{token_id}", "namespace": config["namespace"], "labels": config["labels"]}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": config["token_type"],
        "stringData": data,
    }


def due(lease, minted, identity, config, now):
    """``(go, why)``: whether this copy should claim the Lease and mint now; ``minted``: when the token in Key Vault
    was minted (Unix time, the Lease's annotation as ``epoch`` reads it; None: never, or unreadable)."""
    age = None if minted is None else now.timestamp() - minted
    if age is not None and age < config["period_seconds"]:
        return False, f"the token in Key Vault was minted {int(age)} s ago"
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity")
    held = seconds_since(spec.get("renewTime"), now) if holder and holder != identity else None
    if held is not None and held < spec.get("leaseDurationSeconds", config["claim_seconds"]):
        return False, f"{holder} is minting"
    last = "never" if minted is None else rfc3339(datetime.datetime.fromtimestamp(minted, datetime.timezone.utc))
    return True, f"last minted {last}"


class Minter:
    def __init__(self, config, api=None, vault=None, clock=None):
        self.config = config
        self.call = api or self.apiserver
        self.vault = vault or self.write_to_vault
        self.clock = clock or (lambda: datetime.datetime.now(datetime.timezone.utc))
        self.identity = f"{socket.gethostname()}-{os.getpid()}"
        self.leases = f"/apis/coordination.k8s.io/v1/namespaces/{config['namespace']}/leases"
        self.lease_path = f"{self.leases}/{config['lease']}"
        self.pending = None  # a token made, not yet in Key Vault
        self.minted = None  # Unix time of the token in Key Vault, as the Lease last said

    def apiserver(self, method, path, body=None):
        context = ssl.create_default_context(cafile=self.config["ca_cert"])
        context.load_cert_chain(self.config["cert"], self.config["key"])
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.config["server"] + path, data, method=method)
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=TIMEOUT, context=context) as response:
            return json.load(response)

    def lease(self):
        """The Lease, created if there is none yet."""
        try:
            return self.call("GET", self.lease_path)
        except urllib.error.HTTPError as error:
            if error.code != 404:
                raise
        metadata = {"name": self.config["lease"], "namespace": self.config["namespace"]}
        try:
            return self.call(
                "POST",
                self.leases,
                {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": {}},
            )
        except urllib.error.HTTPError as error:
            if error.code != 409:  # another copy created it first
                raise
        return self.call("GET", self.lease_path)

    def write_to_vault(self, value):
        """PUT the secret's new version (Key Vault REST API, "Set Secret")."""
        token = subprocess.run(self.config["token_command"], capture_output=True, text=True, timeout=120)
        if token.returncode != 0:
            raise OSError(f"no Key Vault token: {token.stderr.strip()}")
        query = urllib.parse.urlencode({"api-version": self.config["vault_api_version"]})
        url = f"{self.config['vault']}/secrets/{self.config['vault_secret']}?{query}"
        request = urllib.request.Request(url, json.dumps({"value": value}).encode(), method="PUT")
        request.add_header("Content-Type", "application/json")
        request.add_header("Authorization", "Bearer " + token.stdout.strip())
        context = ssl.create_default_context(cafile=self.config.get("vault_ca_file"))
        with urllib.request.urlopen(request, timeout=TIMEOUT, context=context) as response:
            response.read()

    def cycle(self):
        """One look at the Lease; mints if due. Returns what it did."""
        now = self.clock()
        lease = self.lease()
        self.minted = epoch((lease["metadata"].get("annotations") or {}).get(self.config["minted_annotation"]))
        go, why = due(lease, self.minted, self.identity, self.config, now)
        if not go:
            return f"not due: {why}"
        stamp = now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # a Lease's MicroTime
        lease["spec"] = {
            **(lease.get("spec") or {}),
            "holderIdentity": self.identity,
            "acquireTime": stamp,
            "renewTime": stamp,
            "leaseDurationSeconds": self.config["claim_seconds"],
        }
        try:
            lease = self.call("PUT", self.lease_path, lease)
        except urllib.error.HTTPError as error:
            if error.code == 409:
                return "another copy claimed the Lease first"
            raise
        # Retried with the token it made, not a new one each time.
        if self.pending is None or (now - self.pending[2]).total_seconds() >= self.config["period_seconds"]:
            token_id, token_value = new_token(self.config)
            self.call(
                "POST",
                f"/api/v1/namespaces/{self.config['namespace']}/secrets",
                token_secret(self.config, token_id, token_value, now),
            )
            self.pending = (token_id, token_value, now)
        token_id, token_value, made = self.pending
        self.vault(f"{token_id}.{token_value}")
        self.pending = None
        lease["metadata"]["annotations"] = {
            **(lease["metadata"].get("annotations") or {}),
            self.config["minted_annotation"]: rfc3339(made),
            self.config["token_id_annotation"]: token_id,
        }
        lease["spec"]["holderIdentity"] = None
        self.call("PUT", self.lease_path, lease)
        self.minted = made.timestamp()
        return f"minted bootstrap-token-{token_id} ({why}) for {self.config['lifetime_seconds']} s, into Key Vault"

    def serve_metrics(self):
        """Serves ``metrics_text`` on the machine's own address until the program ends (one thread per scrape:
        an idle connection holds no other)."""
        metrics, minter = self.config["metrics"], self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                return

            def do_GET(self):  # noqa: N802 - http.server's name
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = metrics_text(metrics["metric"], minter.minted).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        server = http.server.ThreadingHTTPServer((own_address(metrics), metrics["port"]), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    def run(self):
        try:  # minting goes on without it: monitoring then alerts on the missing series
            host, port = self.serve_metrics().server_address[:2]
            self.log(f"serving the mint time on http://{host}:{port}/metrics")
        except (OSError, ValueError) as error:
            self.log(f"not serving the mint time: {error}")
        while True:
            pause = RETRY
            try:
                self.log(self.cycle())
                pause = self.config["check_seconds"]
            except urllib.error.HTTPError as error:
                self.log(f"{error.code} from {error.url}: {error.read()[:300]!r}")
            except Exception as error:  # one bad cycle never ends the unit: it is tried again
                self.log(f"{type(error).__name__}: {error}")
            time.sleep(pause)

    def log(self, text):
        print(f"token-minter: {text}", flush=True)


def main(config_path):
    with open(config_path) as handle:
        Minter(json.load(handle)).run()


if __name__ == "__main__":
    main(sys.argv[1])
