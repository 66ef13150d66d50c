"""A node's rendered pod-network rules, loaded with the real nft in throwaway network namespaces:
pods cannot reach the metadata service or Azure's WireServer ports, the node itself can.

The rules are the file a dev CPU node receives (``/etc/supercluster/pod-network.nft`` in its
cloud-init, from the rendered plan). The topology is tests/infra/test_iptables_rules.py's
outside -- host -- pod, with 169.254.169.254 and 168.63.129.16 held by the outside namespace
(standing in for Azure). Traffic from the pod's address crosses the host's forward hook, the
host's own goes through its output hook: exactly the split between a tenant pod and the host
processes and host-network agents (kube-system only) that sign in as the node's identity.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from infra.addons import monitoring
from infra.addons.monitoring import alertmanager
from infra.facts import ports
from infra.facts.labels import CLOUD_IDENTITY_UID
from infra.node import cni
from plan.artifacts import collect_files
from tests.etcd_specs import clusters
from tests.helpers import require_tool
from tests.infra.test_iptables_rules import POD_IP, Netns, namespaces, topology  # noqa: F401 (fixtures)

# The second stage of scripts/test.sh (tens of seconds): the rendered rules loaded into network namespaces.
pytestmark = pytest.mark.slow

HOST_IP = "10.64.1.4"
# (address, TCP port) -> whether a pod may reach it: AKS's split (infra/node/cni.py).
PROBES = {
    (cni.IMDS_IP, cni.IMDS_PORT): False,
    (cni.WIRESERVER_IP, 80): False,
    (cni.WIRESERVER_IP, 32526): False,
    (cni.WIRESERVER_IP, 53): True,  # DNS over TCP stays open
}


def _node_rules(run, pool: str = "cpu") -> str:
    files = collect_files(run.registrations)
    [path] = [p for p in files if f"-pool-{pool}-" in p and p.endswith(cni.NFT_PATH)]
    return files[path]


def _listen(ns: Netns, ports: list[int], seconds: int = 20) -> subprocess.Popen:
    """Accepts TCP connections on every port for ``seconds``."""
    code = (
        "import socket,sys,select,time\n"
        "socks=[]\n"
        "for p in sys.argv[2:]:\n"
        "    s=socket.socket(); s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1); s.bind(('0.0.0.0',int(p)))\n"
        "    s.listen(8); socks.append(s)\n"
        "print('ready',flush=True)\n"
        "end=time.time()+int(sys.argv[1])\n"
        "while time.time()<end:\n"
        "    for s in select.select(socks,[],[],0.5)[0]: s.accept()[0].close()\n"
    )
    process = subprocess.Popen(
        ["ip", "netns", "exec", ns.name, sys.executable, "-c", code, str(seconds), *map(str, ports)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout.readline().strip() == "ready"
    return process


def _connects(ns: Netns, source: str, address: str, port: int, uid: int = 0) -> bool:
    """Whether a TCP connection from ``source`` opens, made by a process running as ``uid``."""
    code = (
        "import os,socket,sys\n"
        "os.setgid(int(sys.argv[4])); os.setuid(int(sys.argv[4]))\n"
        "s=socket.socket(); s.bind((sys.argv[1],0)); s.settimeout(1)\n"
        "try: s.connect((sys.argv[2],int(sys.argv[3]))); print('open')\n"
        "except OSError as e: print(type(e).__name__)\n"
    )
    return ns.exec(sys.executable, "-c", code, source, address, str(port), str(uid)).stdout.strip() == "open"


def test_pods_cannot_reach_the_nodes_identity_and_the_node_can(topology, dev_plan, tmp_path):  # noqa: F811
    require_tool("nft")
    outside, host, pod = topology["outside"], topology["host"], topology["pod"]
    for address in (cni.IMDS_IP, cni.WIRESERVER_IP):
        outside.exec("ip", "addr", "add", f"{address}/32", "dev", "o0")
        host.exec("ip", "route", "add", address, "via", "10.64.1.9")
    host.exec("sysctl", "-w", "net.ipv4.ip_forward=1")
    rules = tmp_path / "pod-network.nft"
    rules.write_text(_node_rules(dev_plan))
    host.exec("nft", "-f", str(rules))
    host.exec("nft", "-f", str(rules))  # the unit reloads it on every boot: loading twice must work
    listener = _listen(outside, sorted({port for _, port in PROBES}))
    try:
        for (address, port), pod_may in PROBES.items():
            assert _connects(pod, POD_IP, address, port) is pod_may, (address, port)
            assert _connects(host, HOST_IP, address, port), ("the node itself", address, port)
    finally:
        listener.terminate()
        listener.wait(timeout=10)
    # Without the rules, the pod would have reached them all: the drops are what refuse it.
    host.exec("nft", "delete", "table", "ip", cni.TABLE)
    listener = _listen(outside, [80])
    try:
        assert _connects(pod, POD_IP, cni.IMDS_IP, cni.IMDS_PORT)
    finally:
        listener.terminate()
        listener.wait(timeout=10)


NOBODY = 65534


@pytest.mark.parametrize("pool", ["cpu", "platform"])
def test_only_root_on_the_node_reaches_its_identity(topology, dev_plan, tmp_path, pool):  # noqa: F811
    """A host-network process that is not root (node-exporter, node-local-dns, anyone who escapes a container
    as a user) gets no token: the output hook drops its traffic to the metadata service and to WireServer's
    protected ports, root's passes. On a system pool the autoscaler's own user passes too, and only there."""
    require_tool("nft")
    outside, host = topology["outside"], topology["host"]
    for address in (cni.IMDS_IP, cni.WIRESERVER_IP):
        outside.exec("ip", "addr", "add", f"{address}/32", "dev", "o0")
        host.exec("ip", "route", "add", address, "via", "10.64.1.9")
    rules = tmp_path / "pod-network.nft"
    rules.write_text(_node_rules(dev_plan, pool))
    host.exec("nft", "-f", str(rules))
    listener = _listen(outside, [53, 80, 32526])
    try:
        for address, port in ((cni.IMDS_IP, cni.IMDS_PORT), (cni.WIRESERVER_IP, 80), (cni.WIRESERVER_IP, 32526)):
            assert _connects(host, HOST_IP, address, port, uid=0), ("root", address, port)
            assert not _connects(host, HOST_IP, address, port, uid=NOBODY), ("nobody", address, port)
        assert _connects(host, HOST_IP, cni.WIRESERVER_IP, 53, uid=NOBODY), "DNS over TCP stays open to every user"
        assert _connects(host, HOST_IP, cni.IMDS_IP, cni.IMDS_PORT, uid=CLOUD_IDENTITY_UID) is (pool == "platform")
    finally:
        listener.terminate()
        listener.wait(timeout=10)


HUB_IP = "10.250.0.7"  # in dev's hub range, outside the cluster's address space (10.64.0.0/10)
OTHER_MACHINE_IP = "10.64.1.9"  # another node, or a pod of another node: inside the cluster's address space


def test_the_nodes_own_sshd_answers_only_from_outside_the_cluster(topology, dev_plan, tmp_path):  # noqa: F811
    """Node subnets keep port 22 open inside the cluster for MPI's launcher between pods (its NSG), and pods hold
    addresses of those subnets, so the node's own sshd would answer every pod. The input hook drops SSH to the
    node from the cluster's address space: its pods, other nodes' pods, other machines; the hub's break-glass
    SSH (from outside it, the NSG admitting only the hub) still connects, and a pod's own port 22 stays open."""
    require_tool("nft")
    outside, host, pod = topology["outside"], topology["host"], topology["pod"]
    outside.exec("ip", "addr", "add", f"{HUB_IP}/32", "dev", "o0")
    host.exec("ip", "route", "add", HUB_IP, "via", OTHER_MACHINE_IP)
    host.exec("sysctl", "-w", "net.ipv4.ip_forward=1")
    rules = tmp_path / "pod-network.nft"
    rules.write_text(_node_rules(dev_plan))
    host.exec("nft", "-f", str(rules))
    sshd, pod_sshd = _listen(host, [ports.SSH]), _listen(pod, [ports.SSH])
    try:
        assert not _connects(pod, POD_IP, HOST_IP, ports.SSH), "a pod reached its node's sshd"
        assert not _connects(outside, OTHER_MACHINE_IP, HOST_IP, ports.SSH), "another machine reached the node's sshd"
        assert _connects(outside, HUB_IP, HOST_IP, ports.SSH), "the hub's break-glass SSH"
        assert _connects(outside, OTHER_MACHINE_IP, POD_IP, ports.SSH), "MPI's SSH between pods"
        # Without the rules the pod would have reached it: the drop is what refuses it.
        host.exec("nft", "delete", "table", "ip", cni.TABLE)
        assert _connects(pod, POD_IP, HOST_IP, ports.SSH)
    finally:
        for listener in (sshd, pod_sshd):
            listener.terminate()
            listener.wait(timeout=10)


def _host_in(cidr) -> str:
    return str(cidr.network_address + 40)


def test_only_the_system_pools_reach_the_monitoring_stack_on_a_system_node(topology, dev_plan, tmp_path):  # noqa: F811
    """Prometheus, Alertmanager, Grafana and kube-state-metrics answer anyone who reaches them, and run only on
    the system pools. A system-pool node's forward hook lets only the system pools' subnets (the stack itself)
    reach their ports on its pods: a tenant pod, a NAT host (which masquerades the hub's service traffic) or
    another node is dropped. A CPU node carries no such rule: tenants' own pods may serve on those ports."""
    require_tool("nft")
    outside, host, pod = topology["outside"], topology["host"], topology["pod"]
    spec, _, _ = clusters("dev")
    by_pool = {v.pool: v.subnets[0].cidr for v in spec.addresses.vnets if v.pool is not None}
    sources = {
        "a system-pool pod": (_host_in(by_pool["platform"]), True),
        "a tenant pod": (_host_in(by_pool["cpu"]), False),
        "a GPU pod": (_host_in(by_pool["gpu"]), False),
        "a NAT host (the hub's service traffic)": (_host_in(spec.addresses.subnet("nat").cidr), False),
    }
    for address, _ in sources.values():
        outside.exec("ip", "addr", "add", f"{address}/32", "dev", "o0")
        host.exec("ip", "route", "add", address, "via", OTHER_MACHINE_IP)
    host.exec("sysctl", "-w", "net.ipv4.ip_forward=1")
    for pool, system in (("platform", True), ("cpu", False)):
        rules = tmp_path / f"{pool}.nft"
        rules.write_text(_node_rules(dev_plan, pool))
        host.exec("nft", "-f", str(rules))
        listener = _listen(pod, list(monitoring.STACK_TCP_PORTS), seconds=90)
        try:
            for who, (address, allowed) in sources.items():
                for port in monitoring.STACK_TCP_PORTS:
                    reached = _connects(outside, address, POD_IP, port)
                    assert reached is (allowed or not system), (pool, who, port)
        finally:
            listener.terminate()
            listener.wait(timeout=10)
        host.exec("nft", "delete", "table", "ip", cni.TABLE)
    assert f"udp dport {{ {alertmanager.CLUSTER_PORT} }} drop" in _node_rules(dev_plan, "platform")
