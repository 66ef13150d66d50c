"""The box's internal load balancers, as test hosts, with Azure's health probe.

Run inside the load balancer's own namespace (it holds the frontend address from the plan):

    python3 load_balancer.py FRONTEND_IP:PORT PROBE_PATH INTERVAL_S THRESHOLD BACKEND_IP:PORT [...]
    python3 load_balancer.py --ha-ports PROBE_PROTOCOL PROBE_PATH INTERVAL_S THRESHOLD BACKEND_IP:PROBE_PORT [...]

The first is the apiservers' load balancer (a TCP forwarder); the second the NAT hosts' HA-ports rule
as a next hop (components/nat_hosts.py), below.

Like the rendered Azure Standard load balancer (components/control_plane.py): layer 4, new
connections spread over the backends whose HTTPS probe (the rendered ``/readyz``) answers 200,
an established connection stays on its backend (Azure does not cut an established flow when its
backend's probe fails). The probe runs every ``intervalInSeconds`` and a backend changes state
after ``probeThreshold`` consecutive probes that disagree with it, both read from the plan
(learn.microsoft.com/azure/load-balancer/load-balancer-custom-probe-overview, "probeThreshold").
Every backend starts down and is taken in after its first ``probeThreshold`` good probes.
Azure's HTTPS probe does not verify the certificate, and neither does this one.

With ``--ha-ports`` it is a router, not a forwarder: the hub's route sends the service range to the
frontend address as its next hop, and an HA-ports rule (protocol All, port 0) hands every flow that
arrives, whatever its destination and port, to a healthy backend unchanged: the packet keeps its
source and its destination (learn.microsoft.com/azure/load-balancer/load-balancer-ha-ports-overview).
Here every packet coming in on ``eth0`` and not for this host is routed by a table of its own to the
healthy backends (one multipath route, hashed on the 5-tuple as the rule's ``Default`` distribution
does), or dropped while none is healthy; the host sends no ICMP redirects (Azure's load balancer
does not tell the sender to bypass it). Each state change
is printed as one JSON line (``{"t": unix seconds, "backend": "ip:port", "healthy": bool}``), so a
test can read when the load balancer stopped sending to a backend. Stops on SIGTERM.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import ssl
import subprocess
import sys
import time

# A probe that has not answered in this long failed. Azure does not publish its probe timeout as a
# setting; the box's is short so that a backend that stopped answering fails its probe within the interval.
PROBE_TIMEOUT_SECONDS = 2.0
# The routing table the HA-ports mode routes forwarded packets by (any number not used by the kernel).
HA_PORTS_TABLE = "100"


async def probe(host: str, port: int, path: str, tls: bool = True) -> bool:
    context = ssl.create_default_context() if tls else None
    if context is not None:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=context), PROBE_TIMEOUT_SECONDS)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        status = await asyncio.wait_for(reader.readline(), PROBE_TIMEOUT_SECONDS)
        writer.close()
        return status.split()[1:2] == [b"200"]
    except (TimeoutError, OSError, ssl.SSLError, IndexError):
        return False


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


class Backends:
    """Each backend's state as the probe's consecutive answers decide it."""

    def __init__(self, backends: list[tuple[str, int]], threshold: int) -> None:
        self.backends = backends
        self.threshold = threshold
        self.up = dict.fromkeys(backends, False)
        self.streak = dict.fromkeys(backends, 0)  # consecutive probes disagreeing with the state

    def observe(self, backend: tuple[str, int], ok: bool) -> None:
        self.streak[backend] = self.streak[backend] + 1 if ok != self.up[backend] else 0
        if self.streak[backend] >= self.threshold:
            self.up[backend], self.streak[backend] = ok, 0
            print(json.dumps({"t": time.time(), "backend": f"{backend[0]}:{backend[1]}", "healthy": ok}), flush=True)

    @property
    def healthy(self) -> list[tuple[str, int]]:
        return [b for b in self.backends if self.up[b]]


async def watch(state: Backends, path: str, interval: float, tls: bool = True, on_change=None) -> None:
    """Probes every backend each ``interval``; calls ``on_change(healthy)`` whenever the healthy set changes."""
    healthy = state.healthy
    while True:
        started = time.monotonic()
        results = await asyncio.gather(*(probe(h, p, path, tls) for h, p in state.backends))
        for backend, ok in zip(state.backends, results, strict=True):
            state.observe(backend, ok)
        if on_change is not None and state.healthy != healthy:
            healthy = state.healthy
            on_change(healthy)
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))


def ha_ports_route(healthy: list[tuple[str, int]]) -> list[str]:
    """The ``ip route`` command sending every forwarded packet to the healthy backends (dropped with none)."""
    if not healthy:
        return ["ip", "route", "replace", "blackhole", "default", "table", HA_PORTS_TABLE]
    hops = [word for host, _ in healthy for word in ("nexthop", "via", host, "dev", "eth0")]
    return ["ip", "route", "replace", "default", "table", HA_PORTS_TABLE, *hops]


def _ip(argv: list[str]) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=10)


async def ha_ports(protocol: str, path: str, interval: float, threshold: int, backends: list[tuple[str, int]]) -> None:
    for setting in (
        "net.ipv4.ip_forward=1",
        "net.ipv4.conf.all.send_redirects=0",
        "net.ipv4.conf.eth0.send_redirects=0",
        "net.ipv4.fib_multipath_hash_policy=1",  # layer 4: the 5-tuple
    ):
        _ip(["sysctl", "-w", setting])
    _ip(ha_ports_route([]))
    _ip(["ip", "rule", "add", "iif", "eth0", "lookup", HA_PORTS_TABLE])
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    state = Backends(backends, threshold)
    watcher = asyncio.create_task(
        watch(state, path, interval, protocol.lower() == "https", lambda h: _ip(ha_ports_route(h)))
    )
    await stop.wait()
    watcher.cancel()


async def main(frontend: str, path: str, interval: float, threshold: int, backends: list[tuple[str, int]]) -> None:
    state = Backends(backends, threshold)
    turn = itertools.count()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        healthy = state.healthy
        if not healthy:
            writer.close()
            return
        host, port = healthy[next(turn) % len(healthy)]
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(host, port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    host, port = frontend.rsplit(":", 1)
    server = await asyncio.start_server(serve, host, int(port))
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    watcher = asyncio.create_task(watch(state, path, interval))
    async with server:
        await stop.wait()
    watcher.cancel()


def _backends(args: list[str]) -> list[tuple[str, int]]:
    return [(b.rsplit(":", 1)[0], int(b.rsplit(":", 1)[1])) for b in args]


if __name__ == "__main__":
    if sys.argv[1] == "--ha-ports":
        protocol_arg, probe_path, interval_arg, threshold_arg, *backend_args = sys.argv[2:]
        asyncio.run(
            ha_ports(protocol_arg, probe_path, float(interval_arg), int(threshold_arg), _backends(backend_args))
        )
    else:
        frontend_arg, probe_path, interval_arg, threshold_arg, *backend_args = sys.argv[1:]
        asyncio.run(main(frontend_arg, probe_path, float(interval_arg), int(threshold_arg), _backends(backend_args)))
