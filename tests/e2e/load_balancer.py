"""The apiservers' internal load balancer, as a test host: a TCP forwarder with Azure's health probe.

Run inside the load balancer's own namespace (it holds the frontend address from the plan):

    python3 load_balancer.py FRONTEND_IP:PORT PROBE_PATH BACKEND_IP:PORT [BACKEND_IP:PORT ...]

Like the rendered Azure Standard load balancer (components/control_plane.py): layer 4, new
connections spread over the backends whose HTTPS probe (the rendered ``/readyz``) answers 200,
an established connection stays on its backend. Azure's HTTPS probe does not verify the
certificate, and neither does this one. Stops on SIGTERM.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import ssl
import sys

PROBE_INTERVAL_SECONDS = 1.0


async def probe(host: str, port: int, path: str) -> bool:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=context), 2)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        status = await asyncio.wait_for(reader.readline(), 2)
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


async def main(frontend: str, path: str, backends: list[tuple[str, int]]) -> None:
    healthy: list[tuple[str, int]] = []
    turn = itertools.count()

    async def watch() -> None:
        while True:
            results = await asyncio.gather(*(probe(h, p, path) for h, p in backends))
            healthy[:] = [b for b, ok in zip(backends, results, strict=True) if ok]
            await asyncio.sleep(PROBE_INTERVAL_SECONDS)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
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
    watcher = asyncio.create_task(watch())
    async with server:
        await stop.wait()
    watcher.cancel()


if __name__ == "__main__":
    frontend_arg, probe_path, *backend_args = sys.argv[1:]
    parsed = [(b.rsplit(":", 1)[0], int(b.rsplit(":", 1)[1])) for b in backend_args]
    asyncio.run(main(frontend_arg, probe_path, parsed))
