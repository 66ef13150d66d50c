"""Real nodes in the cluster in a box: containerd, runc, the CNI plugins, kubelet and kube-proxy run
as rendered, and pods get exactly the addresses Azure CNI would give them.

For each node the harness makes real (``start_real_node``), inside its machine's namespace (one
mount namespace shared by all its processes, as on a machine, so containerd and runc see the
volumes kubelet mounts):

1. its rendered files (``cluster.install``), containerd's ``config.toml`` and the box's overrides
   (below); runc, the CNI plugins and the resolver files where the rendered configs look for them;
2. its network as the rendered units set it: every per-network-namespace sysctl of the rendered
   ``sysctl.d`` file, the pod-network nftables (that unit's ``ExecStart``, verbatim) and the
   traffic-accounting rules (likewise);
3. pod networking in place of Azure CNI (``pod_network``): the standard bridge plugin on the rendered
   bridge name with host-local IPAM handing out exactly the plan's secondary IP configurations of
   the node's NIC, the rendered portmap plugin after it. Azure's VNet delivers a NIC's secondary
   addresses to its VM: here the node answers ARP for them on its NIC (proxy neighbour entries) and
   routes them onto its bridge;
4. containerd from its unit's ``ExecStart``, then the preload unit's ``ExecStart`` (the pause image
   imported from the machine image's archive, as on Azure), then kubelet and kube-proxy from theirs.

The overrides, each a substitution docs/cluster-in-a-box.md states (nothing a node receives changes):
- ``cgroupDriver: cgroupfs`` and runc's ``SystemdCgroup = false``: no systemd here (cgroups v1);
- a ``cgroupRoot`` of the node's own: every node shares this machine's cgroup tree, and a kubelet
  removes pod cgroups it does not know;
- ``protectKernelDefaults: false``: the rendered machine-wide sysctls (``vm.*``, ``kernel.*``) are not
  applied to this shared machine, so kubelet would refuse to start;
- GPU nodes: containerd's ``nvidia`` runtime runs runc itself (no GPUs, no NVIDIA toolkit);
- ``restrict_oom_score_adj = true``: this sandbox withholds CAP_SYS_RESOURCE, so no OOM score may be
  lowered (kubelet asks -998 for pod sandboxes, and the rendered unit's ``OOMScoreAdjust=-999``);
- disk eviction thresholds in bytes (``BOX_EVICTION_HARD``): every node's kubelet and containerd
  directories are folders on this machine's one disk, so kubelet's default percentages measure the
  machine's free space, not the node's: below 15 % free, every node reports DiskPressure and evicts.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w
import yaml

from infra.cluster.whole_cluster import EVICTION_MEMORY_BYTES
from infra.network import iptables
from infra.node import cni, containerd, install, kube_proxy, kubelet, sysctls
from infra.node import pinned_images as node_images
from plan.stackfile import PROJECT_DIR
from tests.e2e import attestation, dns, imds
from tests.e2e.hosts import BINARIES_PATH as BINARIES
from tests.e2e.hosts import Host, Process, TestNetwork, wait_for
from tests.e2e.images import BoxImages, Image
from tests.e2e.plan_machines import Machine

# Azure's subnet gateway is the subnet's first address (learn.microsoft.com/azure/virtual-network/
# virtual-networks-faq, "Are there any restrictions on using IP addresses within these subnets?").
GATEWAY_OFFSET = 1
KUBELET_DROP_IN = "etc/kubernetes/kubelet.conf.d/90-cluster-in-a-box.conf"
CNI_PLUGINS = ("bridge", "host-local", *install.CNI_PLUGINS)
CGROUP_ROOT = Path("/sys/fs/cgroup")
# What a VM's systemd-resolved forwards to: Azure's DNS at the platform address.
AZURE_DNS = cni.WIRESERVER_IP
PLATFORM_ADDRESSES = (cni.IMDS_IP, cni.WIRESERVER_IP)
# A peer in private address space outside the cluster (the hub's side: researchers' VPN, on-premises),
# and a host at a public-looking address standing in for the internet (the test resolver's one name).
PRIVATE_PEER = "192.168.255.10"
INTERNET_HOST = dns.EXTERNAL_ADDRESS
OUTSIDE_ADDRESSES = (*PLATFORM_ADDRESSES, PRIVATE_PEER, INTERNET_HOST)
OUTSIDE_PORT = 8080


@dataclass
class RealNode:
    machine: Machine
    host: Host
    subnet: ipaddress.IPv4Network
    pod_ips: tuple[str, ...]
    refused_sysctls: tuple[str, ...] = ()  # rendered settings this network namespace does not have

    @property
    def cgroup_parent(self) -> str:
        return f"/box-{self.host.namespace}"


# kubelet's hard eviction thresholds on the box's nodes. The rendered config keeps kubelet's defaults
# (KubeletConfiguration evictionHard: memory.available<100Mi, nodefs.available<10%, imagefs.available<15%,
# nodefs.inodesFree<5%, imagefs.inodesFree<5%), measured on a node's own OS disk and local SSD. Here
# the disks are this machine's, shared by every node and the rest of the machine: on this machine
# (252 GB disk, 41 GB free) a box run of 2026-11-26 saw kubelet report 37 GB available against a
# 40.6 GB threshold, every real node tainted disk-pressure, the monitoring pods evicted and the
# test pods Pending. Memory keeps its default; the disk signals become a small absolute floor, so a
# node still evicts when the machine's disk is truly full. kubelet 1.33 replaces the whole default map
# when one signal is set, so all are named.
BOX_EVICTION_HARD = {
    "memory.available": f"{EVICTION_MEMORY_BYTES // 2**20}Mi",
    "nodefs.available": "1Gi",
    "imagefs.available": "1Gi",
    "nodefs.inodesFree": "5%",
    "imagefs.inodesFree": "5%",
}


def _drop_in(node: RealNode) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": node.cgroup_parent,
        "protectKernelDefaults": False,
        "evictionHard": BOX_EVICTION_HARD,
    }


def _containerd_config(rendered: str, runc_path: str) -> str:
    config = tomllib.loads(rendered)
    # This sandbox withholds CAP_SYS_RESOURCE, without which no process may lower an OOM score: kubelet
    # asks -998 for every pod sandbox. containerd keeps containers at no lower than its own score instead.
    config["plugins"][containerd.CRI]["restrict_oom_score_adj"] = True
    for runtime in config["plugins"][containerd.CRI]["containerd"]["runtimes"].values():
        runtime["options"]["SystemdCgroup"] = False
        runtime["options"]["BinaryName"] = runc_path
    return tomli_w.dumps(config)


def pod_network(rendered_conflist: dict[str, Any], subnet: ipaddress.IPv4Network, pod_ips: tuple[str, ...]) -> dict:
    """The conflist standing in for Azure CNI's: one host-local range per pod address of the NIC, the
    subnet's gateway as the pods' default route, the rendered bridge name and chained plugins kept."""
    azure, *chained = rendered_conflist["plugins"]
    gateway = str(subnet.network_address + GATEWAY_OFFSET)
    # A NIC without pod IP configurations (a NAT host) has nothing to hand out: its one "range" is the
    # gateway alone, which host-local never allocates, so a pod there fails as on Azure.
    addresses = pod_ips or (gateway,)
    ranges = [{"subnet": str(subnet), "rangeStart": ip, "rangeEnd": ip, "gateway": gateway} for ip in addresses]
    bridge = {
        "type": "bridge",
        "bridge": azure["bridge"],
        "isGateway": False,
        "ipam": {"type": "host-local", "ranges": [ranges], "routes": [{"dst": "0.0.0.0/0", "gw": gateway}]},
    }
    return {**rendered_conflist, "cniVersion": "0.3.1", "plugins": [bridge, *chained]}


def _per_namespace_sysctls(machine: Machine) -> list[str]:
    """The rendered ``net.*`` settings of every ``sysctl.d`` file, in systemd-sysctl's order (by file
    name; a NAT host has its forwarding file too): a network namespace has its own; the rest are machine-wide."""
    folder = machine.files / Path(sysctls.SYSCTL_PATH).parent.relative_to("/")
    text = "\n".join(f.read_text() for f in sorted(folder.glob("*.conf")))
    lines = [line.replace(" ", "") for line in text.splitlines() if line and not line.startswith("#")]
    return [line for line in lines if line.startswith("net.")]


def _exec_start(machine: Machine, unit: str) -> list[str]:
    return machine.unit(unit).exec_start


def prepare(
    network: TestNetwork,
    node: RealNode,
    binaries: Path,
    archives: dict[str, Path],
    service_cidr: ipaddress.IPv4Network,
) -> list[str]:
    """Everything before containerd starts; returns the rendered sysctls this network namespace refused."""
    host, machine = node.host, node.machine
    root = host.root
    # Azure's DNS resolves a VM's name to its address (kubelet finds its node address that way) and is
    # the VM's resolver (systemd-resolved's upstream, in the file kubelet's rendered resolvConf names).
    hosts_file = root / "etc-hosts"
    hosts_file.write_text(f"127.0.0.1 localhost\n{machine.ip} {machine.name}\n")
    resolv = root / yaml.safe_load((machine.files / kubelet.CONFIG_PATH.lstrip("/")).read_text())["resolvConf"].lstrip(
        "/"
    )
    resolv.write_text(f"nameserver {AZURE_DNS}\n")
    binds = [
        f"mount --bind {shlex.quote(str(f))} {path}"
        for path, f in (("/etc/hosts", hosts_file), ("/etc/resolv.conf", resolv))
    ]
    network.share_mounts(host, [*binds, *_cgroup_mounts()])
    # Files: containerd's config with the box's overrides, kubelet's drop-in, runc and the CNI plugins.
    config = root / containerd.CONFIG_PATH.lstrip("/")
    config.parent.mkdir(parents=True, exist_ok=True)
    rendered = (machine.files / containerd.CONFIG_PATH.lstrip("/")).read_text()
    config.write_text(_containerd_config(rendered, install.RUNC_PATH))
    drop_in = root / KUBELET_DROP_IN
    drop_in.parent.mkdir(parents=True, exist_ok=True)
    drop_in.write_text(yaml.safe_dump(_drop_in(node)))
    shutil.copy2(binaries / "runc", root / install.RUNC_PATH.lstrip("/"))
    for plugin in CNI_PLUGINS:
        shutil.copy2(binaries / "cni" / plugin, root / install.CNI_BIN.lstrip("/") / plugin)
    rendered_conflist = json.loads((machine.files / cni.CONFLIST_PATH.lstrip("/")).read_text())
    conflist = root / cni.CONFLIST_PATH.lstrip("/")
    conflist.parent.mkdir(parents=True, exist_ok=True)
    conflist.write_text(json.dumps(pod_network(rendered_conflist, node.subnet, node.pod_ips), indent=2))
    for reference, archive in archives.items():
        target = root / node_images.archive_path(reference).lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(archive, target)
    _make_cgroups(node)
    # Network: the rendered sysctls this namespace has, the rendered rules, then the pod bridge.
    refused = []
    for setting in _per_namespace_sysctls(machine):
        if network.run(host, ["sysctl", "-w", setting], check=False).returncode != 0:
            refused.append(setting)
    for unit in (cni.UNIT, *_ruleset_units(machine)):
        network.run(host, _exec_start(machine, unit))
    bridge = rendered_conflist["plugins"][0]["bridge"]
    gateway = str(node.subnet.network_address + GATEWAY_OFFSET)
    commands = [
        ["ip", "link", "add", bridge, "type", "bridge"],
        ["ip", "addr", "add", f"{gateway}/32", "dev", bridge],
        ["ip", "link", "set", bridge, "up"],
        ["sysctl", "-w", f"net.ipv4.conf.{bridge}.proxy_arp=1"],
    ]
    # Azure's host answers every ARP request in a VNet itself, with one MAC (12:34:56:78:9a:bc: untangled.eu,
    # "Networking in Microsoft Azure - Part I"); Linux delays a proxied answer to a broadcast request by a random
    # time up to proxy_delay (0.8 s by default), which each new pod's first packets would pay here and not on Azure.
    commands += [["sysctl", "-w", f"net.ipv4.neigh.{device}.proxy_delay=0"] for device in ("eth0", bridge)]
    # The hosts outside the cluster (start_outside_hosts), through the NIC: on Azure, Azure's platform
    # addresses by the routes its DHCP gives, the rest through the VNet's (and the NAT hosts') routing.
    commands += [["ip", "route", "add", f"{ip}/32", "dev", "eth0"] for ip in OUTSIDE_ADDRESSES]
    # The Service range through the NIC, where a VM's default route sends it: a node's own connection to
    # a ClusterIP (NodeLocal DNS to CoreDNS) needs a route before kube-proxy's rules rewrite it.
    commands.append(["ip", "route", "add", str(service_cidr), "dev", "eth0"])
    for ip in node.pod_ips:
        commands += [
            ["ip", "route", "add", f"{ip}/32", "dev", bridge],
            ["ip", "neigh", "add", "proxy", ip, "dev", "eth0"],
        ]
    network.run(host, ["sh", "-c", " && ".join(" ".join(c) for c in commands)])
    return refused


def _ruleset_units(machine: Machine) -> list[str]:
    """The oneshot units that load the rendered iptables rulesets before kubelet (traffic accounting; a NAT
    host's forward filter, infra/nat_hosts.py): one per rules file (infra/network/iptables.py)."""
    rules = machine.files / iptables.RULES_DIR.lstrip("/")
    return sorted(iptables.Ruleset(p.stem, "", ()).unit for p in rules.glob("*.rules"))


def _cgroup_mounts() -> list[str]:
    """Shell commands mounting this machine's cgroup hierarchies at /sys/fs/cgroup again: ``ip netns exec``
    mounts a sysfs of the namespace's own over /sys, which hides them."""
    commands = [f"mount -t tmpfs -o mode=755 tmpfs {CGROUP_ROOT}"]
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, target, fstype, options, *_ = line.split()
        if fstype in ("cgroup", "cgroup2") and target.startswith(f"{CGROUP_ROOT}/"):
            wanted = ",".join(o for o in options.split(",") if o not in ("rw", "relatime", "nosuid", "nodev", "noexec"))
            mount_options = f"-o {wanted}" if wanted else ""
            commands.append(f"mkdir -p {target} && mount -t {fstype} {mount_options} {fstype} {target}")
    return commands


def _subsystems() -> list[Path]:
    return [p for p in CGROUP_ROOT.iterdir() if p.is_dir() and (p / "cgroup.procs").exists()]


def _make_cgroups(node: RealNode) -> None:
    """The node's cgroupRoot in every hierarchy (kubelet refuses a root that does not exist); cpuset's
    needs its parent's CPUs and memory nodes before a process may join it."""
    for hierarchy in _subsystems():
        path = hierarchy / node.cgroup_parent.lstrip("/")
        path.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):
            if (path / name).exists() and not (path / name).read_text().strip():
                (path / name).write_text((hierarchy / name).read_text())


def remove_cgroups(node: RealNode) -> None:
    """Kills whatever still runs in the node's cgroups (containers outlive their shims' groups), then
    removes them, deepest first."""
    for hierarchy in _subsystems():
        top = hierarchy / node.cgroup_parent.lstrip("/")
        if not top.exists():
            continue
        # Walked with os.walk, which skips a group that goes while it is read (a runtime still removing
        # its own): pathlib's rglob raises on one.
        groups = [Path(folder) for folder, _, _ in os.walk(top)]
        for group in groups:
            with contextlib.suppress(FileNotFoundError):
                for pid in (group / "cgroup.procs").read_text().split():
                    subprocess.run(["kill", "-9", pid], capture_output=True, timeout=10)
        for directory in sorted(groups, key=lambda p: -len(p.parts)):
            wait_for(f"{directory} to empty", lambda d=directory: _rmdir(d), timeout=10, interval=0.1)


def _rmdir(path: Path) -> bool:
    try:
        path.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def kill_namespace_processes(host: Host) -> None:
    """containerd's shims leave its process group: every process still in the node's namespace goes."""
    pids = subprocess.run(["ip", "netns", "pids", host.namespace], capture_output=True, text=True, timeout=10)
    for pid in pids.stdout.split():
        subprocess.run(["kill", "-9", pid], capture_output=True, timeout=10)


def start_real_node(
    network: TestNetwork,
    machine: Machine,
    host: Host,
    box_images: BoxImages,
    start_unit: Callable[[str], Process],
    service_cidr: ipaddress.IPv4Network,
    node_join: Callable[[], None],
) -> tuple[RealNode, Process]:
    """Prepares ``machine`` as a real node and starts containerd, the preload, its join (``node_join``: the
    client certificate kubelet requires) and kubelet (returned, after its providerID drop-in), each from its
    rendered unit."""
    assert machine.subnet is not None, f"{machine.name}: the plan gives its NIC no subnet"
    node = RealNode(machine, host, machine.subnet, machine.pod_ips)
    node.refused_sysctls = tuple(
        prepare(network, node, network.binaries, {box_images.pause.reference: box_images.pause.archive}, service_cidr)
    )
    start_unit(containerd.UNIT)
    wait_for(
        f"containerd on {host.name} to answer",
        lambda: network.run(host, [f"{install.BIN}/ctr", "version"], check=False).returncode == 0,
        timeout=60,
        interval=0.5,
    )
    network.run(host, _exec_start(machine, node_images.UNIT), timeout=120)
    for image in box_images.imported:
        import_image(network, node, image)
    node_join()
    # kubelet's ExecStartPre, as systemd runs it: its providerID from the IMDS stand-in's compute metadata
    # (machine/node/provider_id.py), which the serving certificates' approver resolves through Resource Manager.
    for line in machine.unit(kubelet.UNIT).get("Service", "ExecStartPre"):
        network.run(host, shlex.split(line), timeout=120)
    kubelet_process = start_unit(kubelet.UNIT)
    return node, kubelet_process


IMDS_HOST = "azure-imds"


def _outside_host(network: TestNetwork, name: str, address: str, address_space: ipaddress.IPv4Network) -> Host:
    host = network.add_host(name, [f"{address}/32"])
    network.run(host, ["ip", "route", "add", str(address_space), "dev", "eth0"])
    return host


def start_imds(network: TestNetwork, address_space: ipaddress.IPv4Network) -> Host:
    """The IMDS stand-in (tests/e2e/imds.py) on its platform address, started once per box: apiservers ask it
    for their address at boot, real nodes for their identity's token."""
    if IMDS_HOST not in network.hosts:
        host = _outside_host(network, IMDS_HOST, cni.IMDS_IP, address_space)
        directory = attestation.directory_of(network.workdir)
        argv = [sys.executable, str(Path(imds.__file__)), cni.IMDS_IP, str(cni.IMDS_PORT)]
        project = {"PYTHONPATH": str(PROJECT_DIR)}  # it imports tests/helpers.py
        network.start(host, "imds", [*argv, str(directory)] if directory.exists() else argv, env=project)
    return network.hosts[IMDS_HOST]


def start_outside_hosts(network: TestNetwork, address_space: ipaddress.IPv4Network) -> dict[str, Host]:
    """The test hosts outside the cluster that nodes reach: Azure's metadata service (the IMDS stand-in,
    tests/e2e/imds.py), WireServer (the probe on the ports the pod rules block, so a test can tell a
    dropped packet from a refused one, and Azure's DNS as the test resolver), a private peer and an
    internet host. Each holds its address, routes the cluster's address space back, and reaches
    nothing else."""
    hosts = {IMDS_HOST: start_imds(network, address_space)}
    for name, address in (
        ("azure-platform", cni.WIRESERVER_IP),
        ("private-peer", PRIVATE_PEER),
        ("internet", INTERNET_HOST),
    ):
        hosts[name] = _outside_host(network, name, address, address_space)
    for port in cni.WIRESERVER_BLOCKED_TCP_PORTS:
        network.start(hosts["azure-platform"], f"probe-{port}", [f"{BINARIES}/probe", "serve", str(port)])
    for name in ("private-peer", "internet"):
        network.start(hosts[name], "probe", [f"{BINARIES}/probe", "serve", str(OUTSIDE_PORT)])
    dns.start_test_resolver(network, hosts["azure-platform"], AZURE_DNS, network.workdir)
    return hosts


def start_node_agents(
    network: TestNetwork,
    node: RealNode,
    start_unit: Callable[[str], Process],
    node_local: dns.NodeLocalDns,
    upstream_ip: str,
) -> None:
    """Once the node has registered: kube-proxy (its rendered ``ExecStartPre`` waits for kubelet's client
    certificate, which it signs in with) and NodeLocal DNS (tests/e2e/dns.py). Before returning, the kubelet
    holds its serving certificate too (approved on the apiserver VMs): until then the apiserver's exec and
    logs and Prometheus's scrape of it fail their TLS handshake, as on Azure."""
    # Symlinks to the dated files, by their paths on the machine: seen from here, they dangle.
    pki_dir = node.host.root / "var/lib/kubelet/pki"
    certificate = pki_dir / "kubelet-client-current.pem"
    wait_for(f"{node.host.name}'s kubelet client certificate", certificate.is_symlink, timeout=120)
    start_unit(kube_proxy.UNIT)
    dns.start_node_local_dns(network, node.host, node_local, upstream_ip, network.workdir)
    serving = pki_dir / "kubelet-server-current.pem"
    wait_for(f"{node.host.name}'s kubelet serving certificate", serving.is_symlink, timeout=120)


def import_image(network: TestNetwork, node: RealNode, image: Image) -> None:
    """A box-built image into the node's containerd (namespace ``k8s.io``, kubelet's), under its
    reference and its aliases."""
    staged = Path("/var/lib/supercluster") / image.archive.name
    shutil.copyfile(image.archive, node.host.root / staged.relative_to("/"))
    ctr = [f"{install.BIN}/ctr", "--namespace", "k8s.io"]
    network.run(node.host, [*ctr, "images", "import", "--platform", "linux/amd64", str(staged)], timeout=120)
    for alias in image.aliases:
        network.run(node.host, [*ctr, "images", "tag", "--force", image.reference, alias])


def stop_real_node(node: RealNode) -> None:
    """Every process of the node: those in its network namespace (kubelet, containerd and its shims,
    which leave the process groups the harness stops), then the containers, by their cgroups."""
    kill_namespace_processes(node.host)
    remove_cgroups(node)
