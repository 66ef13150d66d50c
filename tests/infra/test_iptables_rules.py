"""The rendered NAT and traffic-accounting rules, fed to the real iptables in throwaway network namespaces.

Beyond ``iptables-restore --test``, a three-namespace topology (outside -- host -- pod)
shows the rules doing their job: the loader is idempotent, the accounting chains count
each class of peer where it should, and a NAT host forwards hub traffic to a service
(translated by a stand-in for kube-proxy's DNAT) while refusing to forward anything else.
Every namespace is deleted afterwards, whatever happens.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.boot.cloudinit import CloudConfig
from infra.nat_hosts import SYSCTL_PATH, add_nat_host, nat_ruleset
from infra.network.addressing import plan_addresses
from infra.network.iptables import Ruleset, apply_script, render_restore
from infra.network.traffic_counters import accounting_ruleset, traffic_classes
from tests.helpers import parsed, require_tool

# The second stage of scripts/test.sh (tens of seconds): the rendered rules loaded into network namespaces.
pytestmark = pytest.mark.slow

DEV = plan_addresses(parsed("dev"))  # cluster 10.64.0.0/10, services 172.20.0.0/20
PROD = plan_addresses(parsed("prod"))  # cluster 10.0.0.0/8, services 172.20.0.0/16
SERVICE_IP, POD_IP, HOST_POD_SIDE = "172.20.0.10", "10.64.2.5", "10.64.2.1"
OUTSIDE = {"cluster": "10.64.1.9", "private": "192.168.0.9", "internet": "203.0.113.9"}


def run(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(args, input=input, capture_output=True, text=True, check=check, timeout=30)


class Netns:
    def __init__(self, role: str) -> None:
        self.name = f"sc-test-{role}-{uuid.uuid4().hex[:8]}"
        run("ip", "netns", "add", self.name)
        self.exec("ip", "link", "set", "lo", "up")

    def exec(self, *args: str, **kwargs) -> subprocess.CompletedProcess:
        return run("ip", "netns", "exec", self.name, *args, **kwargs)

    def delete(self) -> None:
        run("ip", "netns", "del", self.name, check=False)


@pytest.fixture
def namespaces() -> Iterator[list[Netns]]:
    for tool in ("ip", "iptables-restore", "iptables-save", "sysctl"):
        require_tool(tool)
    if os.geteuid() != 0:  # network namespaces need root (CI runs as root)
        if os.environ.get("CI") == "true":
            pytest.fail("network namespace tests need root")
        pytest.skip("network namespace tests need root")
    created: list[Netns] = []
    try:
        yield created
    finally:
        for ns in created:
            ns.delete()


@pytest.fixture
def host(namespaces) -> Netns:
    namespaces.append(Netns("host"))
    return namespaces[-1]


@pytest.fixture
def topology(namespaces) -> dict[str, Netns]:
    """outside (10.64.1.9 + a private and an internet address) -- host (forwarding) -- pod (10.64.2.5)."""
    outside, host, pod = Netns("out"), Netns("host"), Netns("pod")
    namespaces += [outside, host, pod]
    run("ip", "link", "add", "o0", "netns", outside.name, "type", "veth", "peer", "name", "h0", "netns", host.name)
    run("ip", "link", "add", "h1", "netns", host.name, "type", "veth", "peer", "name", "p0", "netns", pod.name)
    outside.exec("ip", "addr", "add", "10.64.1.9/24", "dev", "o0")
    for address in (OUTSIDE["private"], OUTSIDE["internet"]):
        outside.exec("ip", "addr", "add", f"{address}/32", "dev", "o0")
    host.exec("ip", "addr", "add", "10.64.1.4/24", "dev", "h0")
    host.exec("ip", "addr", "add", f"{HOST_POD_SIDE}/24", "dev", "h1")
    pod.exec("ip", "addr", "add", f"{POD_IP}/24", "dev", "p0")
    for ns, link in ((outside, "o0"), (host, "h0"), (host, "h1"), (pod, "p0")):
        ns.exec("ip", "link", "set", link, "up")
    outside.exec("ip", "route", "add", "default", "via", "10.64.1.4")
    pod.exec("ip", "route", "add", "default", "via", HOST_POD_SIDE)
    for address in (OUTSIDE["private"], OUTSIDE["internet"]):
        host.exec("ip", "route", "add", address, "via", "10.64.1.9")
    return {"outside": outside, "host": host, "pod": pod}


def load(ns: Netns, ruleset: Ruleset, tmp_path: Path) -> None:
    """Runs the rendered loader as the machine would, with the rules file at a temporary path."""
    rules = tmp_path / f"{ruleset.name}.rules"
    rules.write_text(render_restore(ruleset))
    script = tmp_path / f"{ruleset.name}.sh"
    script.write_text(apply_script(ruleset).replace(ruleset.rules_path, str(rules)))
    ns.exec("bash", str(script))


def send_udp(ns: Netns, source: str, destination: str, port: int, *, reply: bool = False) -> str:
    """Sends one datagram from ``source``; with ``reply``, returns the address the answer came from."""
    code = (
        "import socket,sys\n"
        "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind((sys.argv[1],0)); s.settimeout(1)\n"
        "s.sendto(b'ping',(sys.argv[2],int(sys.argv[3])))\n"
        "if sys.argv[4]=='1':\n"
        "    try: print(s.recvfrom(64)[1][0])\n"
        "    except socket.timeout: print('timeout')\n"
    )
    return ns.exec(sys.executable, "-c", code, source, destination, str(port), "1" if reply else "0").stdout.strip()


def udp_echo(ns: Netns, port: int) -> subprocess.Popen:
    """Answers the first datagram and prints its source address (or 'timeout')."""
    code = (
        "import socket,sys\n"
        "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind(('0.0.0.0',int(sys.argv[1]))); s.settimeout(1.5)\n"
        "print('ready',flush=True)\n"
        "try:\n"
        "    data,peer=s.recvfrom(64); s.sendto(data,peer); print(peer[0])\n"
        "except socket.timeout: print('timeout')\n"
    )
    process = subprocess.Popen(
        ["ip", "netns", "exec", ns.name, sys.executable, "-c", code, str(port)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout.readline().strip() == "ready"
    return process


def counters(ns: Netns, table: str) -> dict[tuple[str, str], int]:
    """``{(chain, comment): packets}`` from ``iptables-save -c``."""
    found: dict[tuple[str, str], int] = {}
    for line in ns.exec("iptables-save", "-c", "-t", table).stdout.splitlines():
        match = re.match(r'\[(\d+):\d+\] -A (\S+) .*--comment "([^"]+)"', line)
        if match:
            key = (match[2], match[3])
            found[key] = found.get(key, 0) + int(match[1])
    return found


@pytest.mark.parametrize(
    "ruleset",
    [accounting_ruleset(DEV), accounting_ruleset(PROD), nat_ruleset(DEV), nat_ruleset(PROD)],
    ids=["accounting-dev", "accounting-prod", "nat-dev", "nat-prod"],
)
def test_rendered_rules_pass_iptables_restore_test(ruleset, host):
    result = host.exec("iptables-restore", "--test", "--noflush", input=render_restore(ruleset), check=False)
    assert result.returncode == 0, result.stderr


def test_loading_twice_hooks_each_chain_once_and_refills_it(host, tmp_path):
    ruleset = accounting_ruleset(DEV)
    load(host, ruleset, tmp_path)
    load(host, ruleset, tmp_path)
    saved = host.exec("iptables-save", "-t", "mangle").stdout
    for chain in ruleset.chains:
        assert saved.count(f"-A {chain.hook} -j {chain.name}") == 1, chain.name
        assert saved.count(f"-A {chain.name} ") == len(chain.rules), chain.name


def test_accounting_counts_internet_apart_from_the_cluster(topology, tmp_path):
    outside, host, pod = topology["outside"], topology["host"], topology["pod"]
    host.exec("sysctl", "-w", "net.ipv4.ip_forward=1")
    load(host, accounting_ruleset(DEV), tmp_path)
    for ns in (outside, host):  # no "port unreachable" answers: only the datagrams below are counted
        ns.exec("iptables", "-t", "raw", "-A", "OUTPUT", "-p", "icmp", "-j", "DROP")
    for source in OUTSIDE.values():  # INPUT, by source
        send_udp(outside, source, "10.64.1.4", 9)
    send_udp(host, "10.64.1.4", OUTSIDE["internet"], 9)  # OUTPUT, by destination
    send_udp(host, "10.64.1.4", OUTSIDE["private"], 9)
    send_udp(host, "127.0.0.1", "127.0.0.1", 9)  # loopback: not counted
    send_udp(pod, POD_IP, OUTSIDE["internet"], 9)  # FORWARD, both ways
    seen = counters(host, "mangle")
    prefix = "iptables-exporter supercluster traffic="
    assert seen[("SUPERCLUSTER-ACCT-IN", prefix + "internet-in")] == 1
    assert seen[("SUPERCLUSTER-ACCT-IN", prefix + "private-in")] == 1
    assert seen[("SUPERCLUSTER-ACCT-IN", prefix + "cluster-in")] >= 1
    assert seen[("SUPERCLUSTER-ACCT-OUT", prefix + "internet-out")] == 1
    assert seen[("SUPERCLUSTER-ACCT-OUT", prefix + "private-out")] == 1
    assert seen[("SUPERCLUSTER-ACCT-FWD-IN", prefix + "cluster-in")] == 1
    assert seen[("SUPERCLUSTER-ACCT-FWD-OUT", prefix + "internet-out")] == 1
    assert seen[("SUPERCLUSTER-ACCT-FWD-IN", prefix + "internet-in")] == 0


def test_a_nat_host_forwards_traffic_from_outside_to_a_service_and_nothing_else(topology, tmp_path):
    outside, host, pod = topology["outside"], topology["host"], topology["pod"]
    cloud = CloudConfig()
    add_nat_host(cloud, DEV)
    sysctl = tmp_path / "nat.conf"
    sysctl.write_text(next(f.content for f in cloud.files if f.path == SYSCTL_PATH))
    host.exec("sysctl", "-p", str(sysctl))
    load(host, nat_ruleset(DEV), tmp_path)
    # Stand-in for kube-proxy: the service IP is translated to the pod.
    host.exec(
        "iptables",
        "-t",
        "nat",
        "-A",
        "PREROUTING",
        "-d",
        f"{SERVICE_IP}/32",
        "-p",
        "udp",
        "--dport",
        "53",
        "-j",
        "DNAT",
        "--to-destination",
        f"{POD_IP}:9999",
    )

    def through(source: str, destination: str, port: int) -> tuple[str, str]:
        echo = udp_echo(pod, 9999)
        answered_by = send_udp(outside, source, destination, port, reply=True)
        return echo.communicate(timeout=10)[0].strip(), answered_by

    # From the hub or inside the cluster to a service: forwarded, the host translates nothing itself (the
    # masquerade of hub traffic is kube-proxy's, tests/e2e/test_researcher_access.py), the reply comes back
    # through it from the service's address.
    assert through(OUTSIDE["private"], SERVICE_IP, 53) == (OUTSIDE["private"], SERVICE_IP)
    assert through(OUTSIDE["cluster"], SERVICE_IP, 53) == (OUTSIDE["cluster"], SERVICE_IP)
    # From outside straight to a pod address through the NAT host: not forwarded.
    assert through(OUTSIDE["private"], POD_IP, 9999) == ("timeout", "timeout")


def test_the_accounting_classes_are_the_clusters_own_ranges():
    classes = traffic_classes(PROD)
    assert classes["cluster"] == ("10.0.0.0/8", "172.20.0.0/16")
    assert traffic_classes(DEV)["cluster"] == ("10.64.0.0/10", "172.20.0.0/20")
    assert "169.254.0.0/16" in classes["private"] and "168.63.129.16/32" in classes["private"]
