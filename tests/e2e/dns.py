"""DNS on the cluster in a box's real nodes: NodeLocal DNSCache as node-cache would run it, and a
test resolver standing in for Azure's DNS.

node-cache (``k8s.io/dns``) is not served by the Go module proxy, so on each real node the harness
does what node-cache does at start, then runs CoreDNS (node-cache is CoreDNS plus that set-up):
- an interface holding every ``-localip`` address of the rendered DaemonSet (node-cache's is a
  dummy; this kernel has no dummy driver, so it is a bridge without ports, which behaves the same);
- NOTRACK (raw table) and ACCEPT (filter table) rules for DNS to and from those addresses, so the
  queries bypass conntrack, and with it kube-proxy's DNAT of the kube-dns address;
- the rendered Corefile from the rendered ConfigMap with node-cache's one substitution: the
  upstream token replaced by the ``-upstreamsvc`` Service's ClusterIP. The DaemonSet's volume paths
  in the Corefile are read at the host paths they mount.
Azure's DNS at the platform address is a CoreDNS answering one test zone (``EXTERNAL_NAME``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.addons import node_local_dns
from tests.e2e.hosts import BINARIES_PATH, Host, Process, TestNetwork
from tests.e2e.plan_machines import Plan

DNS_PORT = 53
INTERFACE = "nodelocaldns"  # node-cache's -interfacename default
# The test resolver's one name: a reserved example domain (RFC 2606) at a documentation address
# (RFC 5737 TEST-NET-3), which no real resolver or host answers.
EXTERNAL_NAME = "box.example.com"
EXTERNAL_ADDRESS = "203.0.113.10"


@dataclass(frozen=True)
class NodeLocalDns:
    """What the rendered DaemonSet and ConfigMap say."""

    local_ips: tuple[str, ...]
    upstream_service: str
    corefile: str
    host_paths: dict[str, str]  # container path -> host path, of the DaemonSet's hostPath volumes


def _object(plan: Plan, kind: str, name: str) -> dict[str, Any]:
    for _, document in plan.kubernetes_objects():
        if document["kind"] == kind and document["metadata"]["name"] == name:
            return document
    raise AssertionError(f"the plan has no {kind} {name}")


def rendered_node_local_dns(plan: Plan) -> NodeLocalDns:
    daemonset = _object(plan, "DaemonSet", node_local_dns.NAME)
    pod = daemonset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    flag = {args[i]: args[i + 1] for i in range(0, len(args) - 1, 2)}
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"] if m["name"] in volumes}
    configmap = _object(plan, "ConfigMap", node_local_dns.NAME)
    return NodeLocalDns(tuple(flag["-localip"].split(",")), flag["-upstreamsvc"], configmap["data"]["Corefile"], mounts)


def _rules(local_ips: tuple[str, ...]) -> list[list[str]]:
    rules = []
    for ip in local_ips:
        for protocol in ("udp", "tcp"):
            to_cache = ["-p", protocol, "-d", ip, "--dport", str(DNS_PORT)]
            from_cache = ["-p", protocol, "-s", ip, "--sport", str(DNS_PORT)]
            rules += [
                ["-t", "raw", "-A", "PREROUTING", *to_cache, "-j", "NOTRACK"],
                ["-t", "raw", "-A", "OUTPUT", *to_cache, "-j", "NOTRACK"],
                ["-t", "raw", "-A", "OUTPUT", *from_cache, "-j", "NOTRACK"],
                ["-t", "filter", "-A", "INPUT", *to_cache, "-j", "ACCEPT"],
                ["-t", "filter", "-A", "OUTPUT", *from_cache, "-j", "ACCEPT"],
            ]
    return rules


def start_node_local_dns(
    network: TestNetwork, host: Host, rendered: NodeLocalDns, upstream_ip: str, folder: Path
) -> Process:
    """node-cache's set-up on ``host``, then CoreDNS with the rendered Corefile."""
    # node-cache's interface is a dummy; this kernel has no dummy driver, and a bridge without ports is one.
    commands = [["ip", "link", "add", INTERFACE, "type", "bridge"], ["ip", "link", "set", INTERFACE, "up"]]
    commands += [["ip", "addr", "add", f"{ip}/32", "dev", INTERFACE] for ip in rendered.local_ips]
    commands += [["iptables", "-w", *rule] for rule in _rules(rendered.local_ips)]
    network.run(host, ["sh", "-c", " && ".join(" ".join(c) for c in commands)])
    corefile = rendered.corefile.replace(node_local_dns.CLUSTER_DNS_TOKEN, upstream_ip)
    for container_path, host_path in rendered.host_paths.items():
        corefile = corefile.replace(container_path, host_path)
    path = folder / f"{host.name}-node-local-dns.Corefile"
    path.write_text(corefile)
    return network.start(host, "node-local-dns", [f"{BINARIES_PATH}/coredns", "-conf", str(path)])


def start_test_resolver(network: TestNetwork, host: Host, address: str, folder: Path) -> Process:
    """Azure's DNS at ``address`` on the platform host: the test zone, nothing else."""
    path = folder / "azure-dns.Corefile"
    path.write_text(
        f".:{DNS_PORT} {{\n    bind {address}\n    hosts {{\n        {EXTERNAL_ADDRESS} {EXTERNAL_NAME}\n    }}\n}}\n"
    )
    return network.start(host, "azure-dns", [f"{BINARIES_PATH}/coredns", "-conf", str(path)])
