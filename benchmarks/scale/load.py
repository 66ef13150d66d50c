"""The scale benchmark's load patterns, run on the operator host inside the box (it reaches the apiservers).

    python3 load.py events --server URL --ca CA --cert CRT --key KEY --count N --concurrency C
    python3 load.py pods   --server URL --ca CA --cert CRT --key KEY --file PODS.json --concurrency C
    python3 load.py list   --server URL --ca CA --token FILE --agents K --interval S --duration D --path P
    python3 load.py patch  --server URL --ca CA --cert CRT --key KEY --file PATCHES.json --concurrency C

Prints one JSON object: how many requests, how long, latency p50/p99, and the answers by status
code (429s included). Standard library only, so it runs with the machine's python3 in any host.
``list`` is the per-node agent of the seed posts (Fluentd, Datadog): K agents, each repeating a
LIST every S seconds for D seconds, as a service account (the identity the rendered API Priority
and Fairness configuration classifies). ``patch`` sends JSON patches (``[{"path": ..., "patch": [...]}]``).
"""

from __future__ import annotations

import argparse
import http.client
import json
import ssl
import sys
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse


class Client:
    """One keep-alive HTTPS connection per thread to the load balancer's address."""

    def __init__(self, server: str, ca: str, cert: str | None, key: str | None, token: str | None) -> None:
        self.url = urlparse(server)
        self.context = ssl.create_default_context(cafile=ca)
        if cert:
            self.context.load_cert_chain(cert, key)
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self.local = threading.local()

    def request(
        self, method: str, path: str, body: object | None = None, content_type: str = "application/json"
    ) -> tuple[int, float]:
        """``(status, seconds)``; the body is read and dropped (a LIST's size is the apiserver's cost, not ours)."""
        for attempt in range(2):
            connection = getattr(self.local, "connection", None)
            if connection is None:
                connection = http.client.HTTPSConnection(
                    self.url.hostname, self.url.port, context=self.context, timeout=60
                )
                self.local.connection = connection
            started = time.monotonic()
            try:
                headers = {**self.headers, "Content-Type": content_type}
                connection.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
                response = connection.getresponse()
                while response.read(1 << 20):
                    pass
                return response.status, time.monotonic() - started
            except (OSError, http.client.HTTPException):
                connection.close()
                self.local.connection = None
                if attempt:
                    return 0, time.monotonic() - started
        return 0, 0.0


def summary(results: list[tuple[int, float]], seconds: float) -> dict:
    latencies = sorted(latency for _, latency in results)

    def pct(q: float) -> float | None:
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000, 1) if latencies else None

    return {
        "requests": len(results),
        "seconds": round(seconds, 2),
        "rate": round(len(results) / seconds, 1),
        "p50_ms": pct(0.5),
        "p99_ms": pct(0.99),
        "codes": dict(Counter(str(code) for code, _ in results)),
    }


def run_all(client: Client, calls: list[tuple], concurrency: int) -> dict:
    started = time.monotonic()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(lambda call: client.request(*call), calls))
    return summary(results, time.monotonic() - started)


def events(client: Client, count: int, concurrency: int, namespace: str) -> dict:
    run = uuid.uuid4().hex[:6]
    calls = [
        (
            "POST",
            f"/api/v1/namespaces/{namespace}/events",
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": f"storm-{run}-{i}", "namespace": namespace},
                "involvedObject": {"kind": "Namespace", "name": namespace},
                "reason": "Storm",
                "type": "Normal",
                "message": "an event storm",
            },
        )
        for i in range(count)
    ]
    return run_all(client, calls, concurrency)


def pods(client: Client, documents: list[dict], concurrency: int) -> dict:
    calls = [("POST", f"/api/v1/namespaces/{d['metadata']['namespace']}/pods", d) for d in documents]
    return run_all(client, calls, concurrency)


def patches(client: Client, documents: list[dict], concurrency: int) -> dict:
    calls = [("PATCH", d["path"], d["patch"], "application/json-patch+json") for d in documents]
    return run_all(client, calls, concurrency)


def list_agents(client: Client, agents: int, interval: float, duration: float, path: str) -> dict:
    results: list[tuple[int, float]] = []
    lock = threading.Lock()
    deadline = time.monotonic() + duration

    def agent(index: int) -> None:
        time.sleep(interval * index / max(agents, 1))  # agents are not synchronized
        while time.monotonic() < deadline:
            started = time.monotonic()
            outcome = client.request("GET", path)
            with lock:
                results.append(outcome)
            time.sleep(max(0.0, interval - (time.monotonic() - started)))

    started = time.monotonic()
    threads = [threading.Thread(target=agent, args=(i,), daemon=True) for i in range(agents)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=duration + 120)
    return summary(results, time.monotonic() - started)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["events", "pods", "list", "patch"])
    parser.add_argument("--server", required=True)
    parser.add_argument("--ca", required=True)
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--token")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--file")
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--path", default="/api/v1/pods")
    args = parser.parse_args(argv)
    token = Path(args.token).read_text().strip() if args.token else None
    client = Client(args.server, args.ca, args.cert, args.key, token)
    if args.mode == "events":
        result = events(client, args.count, args.concurrency, args.namespace)
    elif args.mode == "pods":
        with open(args.file) as handle:
            result = pods(client, json.load(handle), args.concurrency)
    elif args.mode == "patch":
        with open(args.file) as handle:
            result = patches(client, json.load(handle), args.concurrency)
    else:
        result = list_agents(client, args.agents, args.interval, args.duration, args.path)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
