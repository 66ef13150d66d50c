"""Prometheus exporter for the node's traffic-accounting rules (comments starting ``iptables-exporter``).

The original iptables-exporter (madron/iptables-exporter) reads rules through python-iptables,
which only sees the legacy backend; Ubuntu 24.04 programs iptables through nf_tables, so it
would report nothing. Here the node runs its *own* ``iptables-save -c`` (the backend it writes
with) every few seconds into ``COUNTERS_FILE`` (infra/traffic_accounting.py), and this exporter
only reads that file: it needs no root, no capability and no more of the host than that file.

Metrics, per (table, chain, rule) summed over identical rule names:
  iptables_rule_packets_total / iptables_rule_bytes_total   counters
  iptables_exporter_scrape_success                          1 if the file is there and fresh
``key=value`` words in the rule name (e.g. ``traffic=internet-in``) become labels too.

Standard library only; ``--once`` prints one scrape and exits.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MARKER = "iptables-exporter "
LABEL_WORD = re.compile(r"^([a-z_][a-z0-9_]*)=([A-Za-z0-9_.:/-]+)$")
RESERVED = {"table", "chain", "rule"}
# How long a connection may stay without a complete request before it is closed (a scrape sends one at once).
REQUEST_TIMEOUT_SECONDS = 10

Key = tuple[str, str, str]


def parse_save(text: str) -> dict[Key, tuple[int, int]]:
    """``iptables-save -c`` output -> {(table, chain, rule name): (packets, bytes)}."""
    counters: dict[Key, tuple[int, int]] = {}
    table = ""
    for line in text.splitlines():
        if line.startswith("*"):
            table = line[1:].strip()
            continue
        match = re.match(r"^\[(\d+):(\d+)\]\s+-A\s+(\S+)\s+(.*)$", line)
        if not match:
            continue
        packets, byte_count, chain, rest = int(match[1]), int(match[2]), match[3], match[4]
        words = shlex.split(rest)
        for i, word in enumerate(words[:-1]):
            if word == "--comment" and words[i + 1].startswith(MARKER):
                key = (table, chain, words[i + 1][len(MARKER):].strip())
                old = counters.get(key, (0, 0))
                counters[key] = (old[0] + packets, old[1] + byte_count)
    return counters


def _labels(table: str, chain: str, rule: str) -> str:
    pairs = [("table", table), ("chain", chain), ("rule", rule)]
    for word in rule.split():
        match = LABEL_WORD.match(word)
        if match and match[1] not in RESERVED:
            pairs.append((match[1], match[2]))
    return ",".join(f'{k}="{_escape(v)}"' for k, v in pairs)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(counters: dict[Key, tuple[int, int]], success: bool) -> str:
    lines = ["# HELP iptables_rule_packets_total Packets matched by traffic-accounting rules.",
             "# TYPE iptables_rule_packets_total counter"]
    lines += [f"iptables_rule_packets_total{{{_labels(*key)}}} {p}" for key, (p, _) in sorted(counters.items())]
    lines += ["# HELP iptables_rule_bytes_total Bytes matched by traffic-accounting rules.",
              "# TYPE iptables_rule_bytes_total counter"]
    lines += [f"iptables_rule_bytes_total{{{_labels(*key)}}} {b}" for key, (_, b) in sorted(counters.items())]
    lines += ["# HELP iptables_exporter_scrape_success Whether iptables-save succeeded.",
              "# TYPE iptables_exporter_scrape_success gauge",
              f"iptables_exporter_scrape_success {1 if success else 0}"]
    return "\n".join(lines) + "\n"


def collect(counters_file: str, max_age_seconds: float) -> str:
    """The file's counters; success only if it exists and the node rewrote it within ``max_age_seconds``
    (a stopped publisher must not look like a quiet node)."""
    try:
        with open(counters_file, encoding="utf-8") as handle:
            age = time.time() - os.fstat(handle.fileno()).st_mtime
            text = handle.read()
    except OSError as error:
        print(f"{counters_file}: {error}", file=sys.stderr, flush=True)
        return render({}, False)
    fresh = age <= max_age_seconds
    if not fresh:
        print(f"{counters_file}: {age:.0f}s old, more than {max_age_seconds:.0f}s", file=sys.stderr, flush=True)
    return render(parse_save(text), fresh)


def serve(address: str, port: int, counters_file: str, max_age_seconds: float) -> None:
    """One thread per connection, each closed after REQUEST_TIMEOUT_SECONDS without a request: the port is on the
    node's host network, where any pod can open a connection and leave it idle."""

    class Handler(BaseHTTPRequestHandler):
        timeout = REQUEST_TIMEOUT_SECONDS

        def do_GET(self) -> None:  # noqa: N802 - http.server's hook name
            if self.path != "/metrics":
                self.send_error(404)
                return
            body = collect(counters_file, max_age_seconds).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:  # one line per scrape would flood the logs
            return

    server = ThreadingHTTPServer((address, port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    source = os.environ["COUNTERS_FILE"]
    max_age = float(os.environ.get("MAX_AGE_SECONDS", "60"))
    if sys.argv[1:] == ["--once"]:
        sys.stdout.write(collect(source, max_age))
    else:
        serve(os.environ.get("LISTEN_ADDRESS", "0.0.0.0"), int(os.environ.get("PORT", "9119")), source, max_age)
