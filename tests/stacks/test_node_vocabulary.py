"""Every add-on workload can land on some node the plan boots: selectors read across the whole plan.

The fast twin of the cluster-in-a-box workload test (tests/e2e): it takes the labels and taints
each machine's rendered kubelet registers with (``--node-labels``, ``registerWithTaints``) and every
Deployment's and DaemonSet's pod template from the plan, and checks the scheduler's node-level
predicates (node selector, required node affinity, taints and tolerations) let it onto at least
one kind of node. A selector that names a label no node registers fails here in seconds.
"""

from __future__ import annotations

import shlex

import pytest

from infra.addons.k8s import pod_templates
from infra.cluster.whole_cluster import unmatched
from infra.config.cluster_config import Taint
from infra.facts.labels import GPU_STARTUP_TAINT_KEY
from plan.artifacts import cloud_init_files, kubernetes_object
from tests.helpers import load_yaml

KUBELET_UNIT = "/etc/systemd/system/kubelet.service"
KUBELET_CONFIG = "/etc/kubernetes/kubelet-config.yaml"


def registered_nodes(run) -> dict[str, tuple[dict[str, str], list[dict]]]:
    """``{machine: (labels, taints)}`` for every machine whose cloud-init starts a kubelet."""
    nodes = {}
    for registration in run.registrations:
        files = cloud_init_files(registration)
        if KUBELET_UNIT not in files:
            continue
        exec_start = next(
            line for line in files[KUBELET_UNIT].replace("\\\n", " ").splitlines() if line.startswith("ExecStart=")
        )
        (flag,) = [a for a in shlex.split(exec_start) if a.startswith("--node-labels=")]
        labels = dict(pair.split("=", 1) for pair in flag.split("=", 1)[1].split(","))
        labels["kubernetes.io/os"] = "linux"  # kubelet sets these itself
        taints = load_yaml(files[KUBELET_CONFIG]).get("registerWithTaints", [])
        nodes[registration.name] = (labels, taints)
    return nodes


def fits(pod: dict, labels: dict[str, str], taints: list[dict]) -> bool:
    """The scheduler's node-level predicates, as the plan's whole-cluster check applies them
    (``infra.cluster.whole_cluster.unmatched``). The GPU start-up taint counts as lifted: the health check removes it
    from healthy nodes, and only what must run before that (checks, agents) tolerates it."""
    lasting = [Taint(**t) for t in taints if t["key"] != GPU_STARTUP_TAINT_KEY]
    return unmatched(pod, labels, lasting) is None


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_add_on_workload_fits_some_node_the_plan_boots(stack, dev_plan, prod_plan):
    run = {"dev": dev_plan, "prod": prod_plan}[stack]
    nodes = registered_nodes(run)
    assert nodes, "the plan boots no node"
    objects = [o for o in map(kubernetes_object, run.registrations) if o is not None]
    workloads = pod_templates(objects)
    assert workloads
    homeless = [
        f"{w['kind']} {w['metadata']['namespace']}/{w['metadata']['name']}"
        for w, pod in workloads
        if not any(fits(pod, labels, taints) for labels, taints in nodes.values())
    ]
    assert not homeless, f"no node the plan boots can run: {homeless}"


def test_a_selector_on_a_label_no_node_registers_is_caught(dev_plan):
    nodes = registered_nodes(dev_plan)
    pod = {"nodeSelector": {"supercluster.io/role": "cpu"}}
    assert any(fits(pod, labels, taints) for labels, taints in nodes.values())
    assert not any(
        fits({"nodeSelector": {"supercluster.io/rol": "cpu"}}, labels, taints) for labels, taints in nodes.values()
    )
    gpu_only = {"nodeSelector": {"supercluster.io/role": "gpu"}}
    assert not any(fits(gpu_only, labels, taints) for labels, taints in nodes.values()), (
        "GPU nodes carry a lasting nvidia.com/gpu taint this pod does not tolerate"
    )


@pytest.mark.slow  # a whole-program run per address (seconds)
@pytest.mark.parametrize("local_ip", ["169.254.20.10", "169.254.25.10"])
def test_the_node_local_dns_address_reaches_every_node_cni_and_the_cache_itself(local_ip):
    """addons.nodeLocalDns.localIp is one value: the cache binds it and every machine's CNI routes it."""
    from tests.conftest import plan_stack

    run = plan_stack("dev", f"addons.nodeLocalDns.localIp={local_ip}")
    conflists = []
    for registration in run.registrations:
        files = cloud_init_files(registration)
        if "/etc/cni/net.d/10-azure.conflist" in files:
            conflists.append(load_yaml(files["/etc/cni/net.d/10-azure.conflist"]))
    assert len(conflists) == 4  # the three pools and the NAT host
    assert all(c["plugins"][0]["ipsToRouteViaHost"] == [local_ip] for c in conflists)
    cache = next(
        o
        for o in map(kubernetes_object, run.registrations)
        if o is not None and o["kind"] == "DaemonSet" and o["metadata"]["name"] == "node-local-dns"
    )
    assert f"{local_ip}," in " ".join(cache["spec"]["template"]["spec"]["containers"][0]["args"])


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_scale_set_admits_as_many_pods_as_its_addresses_plus_its_host_network_daemon_pods(
    stack, dev_plan, prod_plan
):
    """Azure CNI gives every pod off the host network one of the NIC's secondary IP configurations; the
    host-network DaemonSet pods that land on the node take none but count against kubelet's maxPods. So
    maxPods is exactly the two together: fewer, and a GPU node could not run one pod per GPU; more, and
    pods past the addresses never start. Read from what the plan declares: the NIC model, the rendered
    kubelet config and labels, and the DaemonSets the plan applies."""
    run = {"dev": dev_plan, "prod": prod_plan}[stack]
    nodes = registered_nodes(run)
    objects = [o for o in map(kubernetes_object, run.registrations) if o is not None]
    host_network = [o["spec"]["template"]["spec"] for o in objects if o["kind"] == "DaemonSet"]
    host_network = [pod for pod in host_network if pod.get("hostNetwork")]
    checked = 0
    for registration in run.node_scale_sets():
        profile = registration.inputs["virtualMachineProfile"]
        nic = profile["networkProfile"]["networkInterfaceConfigurations"][0]
        pod_configurations = [c for c in nic["ipConfigurations"] if not c.get("primary")]
        files = cloud_init_files(registration)
        labels, taints = nodes[registration.name]
        landing = [pod for pod in host_network if unmatched(pod, labels, [Taint(**t) for t in taints]) is None]
        assert landing, "node-local DNS and the exporters run on the host network of every node"
        max_pods = load_yaml(files[KUBELET_CONFIG])["maxPods"]
        assert max_pods == len(pod_configurations) + len(landing), registration.name
        checked += 1
    assert checked
