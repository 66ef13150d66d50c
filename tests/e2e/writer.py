"""A steady writer for the fault suite: creates ConfigMaps at a fixed rate and reads each one back.

Runs on the operator host inside the box (it reaches the apiservers' load balancer), with the
machine's python3 and the standard library only:

    python3 writer.py --server URL --ca CA --cert CRT --key KEY --namespace NS --rate R [--workers W]

Every request is printed as one JSON line when it ends: ``{"t": unix seconds it started, "op":
"create" | "get", "name": ..., "code": HTTP status (0: no answer), "s": seconds}``. A create
answered 201 is *acknowledged*: the test checks at the end that every acknowledged ConfigMap is
still there. Each worker holds one keep-alive connection (so, like any client behind a layer-4
load balancer, it stays on one apiserver until that connection breaks) and gives up on a request
after ``--timeout`` seconds, then reconnects. Runs until SIGTERM.
"""

from __future__ import annotations

import argparse
import http.client
import json
import signal
import ssl
import sys
import threading
import time
import uuid
from urllib.parse import urlparse


class Worker:
    def __init__(self, args: argparse.Namespace, index: int, lock: threading.Lock) -> None:
        self.args = args
        self.url = urlparse(args.server)
        self.context = ssl.create_default_context(cafile=args.ca)
        self.context.load_cert_chain(args.cert, args.key)
        self.prefix = f"w{index}-{uuid.uuid4().hex[:6]}"
        self.lock = lock
        self.connection: http.client.HTTPSConnection | None = None

    def request(self, method: str, path: str, body: dict | None) -> int:
        if self.connection is None:
            self.connection = http.client.HTTPSConnection(
                self.url.hostname, self.url.port, context=self.context, timeout=self.args.timeout
            )
        try:
            self.connection.request(
                method,
                path,
                body=None if body is None else json.dumps(body),
                headers={"Content-Type": "application/json", "Accept": "application/json"},
            )
            response = self.connection.getresponse()
            response.read()
            return response.status
        except (OSError, http.client.HTTPException):
            self.connection.close()
            self.connection = None
            return 0

    def record(self, op: str, name: str, started: float, code: int) -> None:
        line = json.dumps(
            {"t": round(started, 3), "op": op, "name": name, "code": code, "s": round(time.time() - started, 4)}
        )
        with self.lock:
            print(line, flush=True)

    def run(self, stop: threading.Event, period: float, offset: float) -> None:
        base = f"/api/v1/namespaces/{self.args.namespace}/configmaps"
        next_at = time.monotonic() + offset
        sequence = 0
        while not stop.is_set():
            stop.wait(max(0.0, next_at - time.monotonic()))
            next_at += period
            name = f"{self.prefix}-{sequence:06d}"
            sequence += 1
            body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"n": str(sequence)}}
            started = time.time()
            code = self.request("POST", base, body)
            self.record("create", name, started, code)
            if code == 201:
                started = time.time()
                self.record("get", name, started, self.request("GET", f"{base}/{name}", None))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    for flag in ("--server", "--ca", "--cert", "--key", "--namespace"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--rate", type=float, default=10.0, help="creates per second, over all workers")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds a request may take")
    args = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    lock = threading.Lock()
    period = args.workers / args.rate
    threads = [
        threading.Thread(target=Worker(args, i, lock).run, args=(stop, period, period * i / args.workers))
        for i in range(args.workers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    main(sys.argv[1:])
