"""URLs built from an address and a well-known port, built here only."""

from __future__ import annotations

from infra.facts import ports


def apiserver_url(host: str) -> str:
    """kube-apiserver at ``host`` (the internal load balancer's address, or 127.0.0.1 on its own VM)."""
    return f"https://{host}:{ports.APISERVER}"


# Each apiserver VM's own apiserver: its control-plane components and readiness check use it.
LOCAL_APISERVER = apiserver_url("127.0.0.1")
