"""NAT hosts (7,500-node post): how researchers outside the cluster reach the service range.

The hub routes ``network.serviceCidr`` to an internal Standard load balancer whose
HA-ports rule spreads every flow over a few NAT hosts (``network.natHosts.count``).
Each host is a tainted cluster node: kube-proxy on it knows every service and DNATs
the service IP to a pod, exactly as on any node. What makes it a NAT host:

- IP forwarding on (in Azure on the NIC, in Linux by sysctl), ICMP redirects off: the
  host forwards on the interface the packet came in on, and a redirect would only tell
  the sender to bypass the load balancer;
- it forwards from outside the cluster only what is bound for a service, so it is never an
  open router.

It adds no translation of its own: kube-proxy, with the ``clusterCIDR`` and ``detectLocalMode:
ClusterCIDR`` every node renders (infra/node/kube_proxy.py), already masquerades traffic to a
service from outside the cluster ranges, so the pod's reply comes back through this host (which
undoes both translations) instead of going straight to a researcher's address. A rule of the
host's own doing the same was a second, redundant translation (docs/network.md).

``nat_host_cloud_config`` is the node bootstrap (``infra.node``: kubelet registered with
the NAT taint and label, containerd, kube-proxy, the join secrets, traffic accounting)
plus the NAT parts, which run before kubelet and kube-proxy.
"""

from __future__ import annotations

from infra.boot.cloudinit import CloudConfig
from infra.catalog.vm_sizes import VM_SIZES
from infra.config import naming
from infra.config.cluster_config import ClusterConfig, Taint
from infra.facts import labels, roles
from infra.network.addressing import AddressPlan
from infra.network.iptables import Chain, Rule, Ruleset, add_ruleset
from infra.network.traffic_counters import boot_steps
from infra.node import kube_proxy, node_cloud_config
from infra.node.pool import joining_node, preload_images

# Registered by the NAT hosts' kubelets: no workload is scheduled there, kube-proxy still runs.
NAT_HOST_TAINTS = (Taint(labels.NAT_HOST_TAINT_KEY, labels.NAT_HOST_TAINT_VALUE, labels.NAT_HOST_TAINT_EFFECT),)
NAT_HOST_LABELS = labels.node_labels(role=labels.ROLE_NAT_HOST)
# The load balancer's probe: kube-proxy's health endpoint (infra.node.kube_proxy), which answers 200
# only while kube-proxy's rules are in sync, i.e. while the host can translate services.
KUBE_PROXY_HEALTHZ_PORT = kube_proxy.HEALTHZ_PORT
KUBE_PROXY_HEALTHZ_PATH = "/healthz"
SYSCTL_PATH = "/etc/sysctl.d/60-supercluster-nat-host.conf"
# In place before the services that program or use the host's netfilter state.
BEFORE = ("kubelet.service", "kube-proxy.service")


def sysctls() -> dict[str, str]:
    return {
        "net.ipv4.ip_forward": "1",
        "net.ipv4.conf.all.send_redirects": "0",
        "net.ipv4.conf.default.send_redirects": "0",
    }


def render_sysctl(values: dict[str, str]) -> str:
    lines = ["# Written by supercluster: NAT host forwarding (infra/nat_hosts.py)."]
    lines += [f"{key} = {value}" for key, value in sorted(values.items())]
    return "\n".join(lines) + "\n"


def nat_ruleset(plan: AddressPlan) -> Ruleset:
    cluster = [str(r) for r in plan.cluster_ranges]
    service = str(plan.service_cidr)
    forward = Chain(
        "filter",
        "SUPERCLUSTER-NAT-FWD",
        "FORWARD",
        (
            Rule(("-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED"), "RETURN"),
            *(Rule(("-s", cidr), "RETURN") for cidr in cluster),
            # kube-proxy has already rewritten the destination to a pod; conntrack remembers the service IP.
            Rule(("-m", "conntrack", "--ctorigdst", service), "RETURN"),
            Rule((), "DROP", "from outside the cluster only the service range is forwarded"),
        ),
    )
    return Ruleset("nat-hosts", f"forward only {service} from outside the cluster", (forward,))


def add_nat_host(cloud: CloudConfig, plan: AddressPlan) -> None:
    """Forwarding sysctls (applied now and by systemd-sysctl on every later boot) and the NAT rules."""
    cloud.add(SYSCTL_PATH, render_sysctl(sysctls()))
    cloud.runcmd.append(["sysctl", "--load", SYSCTL_PATH])
    add_ruleset(cloud, nat_ruleset(plan), before=BEFORE)


# The NIC has one IP configuration (no pod IPs): only host-network DaemonSet pods that tolerate
# the NAT taint run here (kube-proxy is a systemd unit); kubelet counts them against maxPods.
NAT_HOST_MAX_PODS = 16


def nat_host_cloud_config(
    config: ClusterConfig, plan: AddressPlan, vault_name: str, *, kubernetes_version: str
) -> CloudConfig:
    """A NAT host's whole cloud-init: a tainted node that forwards and masquerades the service range.
    ``kubernetes_version``: the nodes' release (it follows the apiservers, infra/day2/deploy_rules.py)."""
    spec = joining_node(
        config,
        plan,
        VM_SIZES[config.network.nat_hosts.vm_size],
        kubernetes_version=kubernetes_version,
        role=roles.NAT_HOST.identity,
        vault_name=vault_name,
        registry_login_server=naming.container_registry_login_server(config.cluster_name),
        images=preload_images(config)[:1],  # the pause image only: nothing else runs here
        max_pods=NAT_HOST_MAX_PODS,
        labels=NAT_HOST_LABELS,
        taints=NAT_HOST_TAINTS,
    )
    return node_cloud_config(spec, before_kubelet=[lambda cloud: add_nat_host(cloud, plan), *boot_steps(config, plan)])
