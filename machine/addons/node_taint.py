"""Keeps this node's GPU start-up taint in line with the GPU check's verdict.

Reads the verdict file the DCGM container writes ("healthy" or "unhealthy: ..."), and
removes the taint when the node is healthy or adds it back when it is not. It touches
only its own Node (NODE_NAME), and only when the verdict changes or every RECONCILE_SECONDS
(with jitter), so 6,000 GPU nodes add a few requests per second to the apiserver, never a
LIST or a WATCH. Each change is a JSON patch guarded by the node's resourceVersion.

Standard library only; runs in a stock Python image.
"""

from __future__ import annotations

import json
import os
import random
import ssl
import sys
import time
import urllib.request

API = "https://kubernetes.default.svc"
ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def desired_taints(taints: list[dict], key: str, effect: str, healthy: bool) -> list[dict]:
    """The node's taints with ours removed (healthy) or present exactly once (unhealthy)."""
    others = [t for t in taints if t.get("key") != key]
    return others if healthy else [*others, {"key": key, "effect": effect}]


def taint_patch(node: dict, key: str, effect: str, healthy: bool) -> list[dict] | None:
    """A JSON patch that makes the node's taints match the verdict, or None when they already do."""
    current = (node.get("spec") or {}).get("taints") or []
    ours = [t for t in current if t.get("key") == key]
    if (healthy and not ours) or (not healthy and len(ours) == 1 and ours[0].get("effect") == effect):
        return None
    wanted = desired_taints(current, key, effect, healthy)
    return [
        {"op": "test", "path": "/metadata/resourceVersion", "value": node["metadata"]["resourceVersion"]},
        {"op": "add", "path": "/spec/taints", "value": wanted},
    ]


def read_verdict(path: str) -> bool | None:
    """True (healthy), False (unhealthy) or None (no verdict yet)."""
    try:
        with open(path) as f:
            text = f.read().strip()
    except FileNotFoundError:
        return None
    return text == "healthy" if text else None


def _request(method: str, path: str, body: object | None = None, content_type: str = "application/json") -> dict:
    with open(f"{ACCOUNT}/token") as f:  # re-read: kubelet rotates the projected token
        token = f.read().strip()
    request = urllib.request.Request(API + path, method=method, data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": content_type,
                                              "Accept": "application/json"})
    context = ssl.create_default_context(cafile=f"{ACCOUNT}/ca.crt")
    with urllib.request.urlopen(request, context=context, timeout=30) as response:
        return json.load(response)


def reconcile(node_name: str, key: str, effect: str, healthy: bool) -> str:
    node = _request("GET", f"/api/v1/nodes/{node_name}")
    patch = taint_patch(node, key, effect, healthy)
    if patch is None:
        return "unchanged"
    _request("PATCH", f"/api/v1/nodes/{node_name}", patch, "application/json-patch+json")
    return "untainted" if healthy else "tainted"


def main() -> None:
    node_name, key, effect = os.environ["NODE_NAME"], os.environ["TAINT_KEY"], os.environ["TAINT_EFFECT"]
    status_file = os.environ["STATUS_FILE"]
    every = int(os.environ["RECONCILE_SECONDS"])
    last: bool | None = None
    next_reconcile = 0.0
    while True:
        verdict = read_verdict(status_file)
        now = time.monotonic()
        if verdict is not None and (verdict != last or now >= next_reconcile):
            try:
                print(f"{node_name}: {'healthy' if verdict else 'unhealthy'}: "
                      f"{reconcile(node_name, key, effect, verdict)}", flush=True)
                last = verdict
                next_reconcile = now + every * random.uniform(0.8, 1.2)
            except Exception as error:  # noqa: BLE001 - log and retry; the verdict file stays the truth
                print(f"{node_name}: reconcile failed: {error}", file=sys.stderr, flush=True)
        time.sleep(5)


if __name__ == "__main__":
    main()
