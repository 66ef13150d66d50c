"""The whole-cluster check (infra/cluster/whole_cluster.py): for each category a seeded combination of valid
values that plans a cluster that cannot work, refused in one line naming the key, and a valid neighbour
that still plans. Then the mechanism itself on a made-up add-on and pool kind: no new rule needed."""

from __future__ import annotations

import pytest

from infra.assembly.desired_cluster import Cluster, assemble
from infra.cluster.cluster_spec import build_cluster_spec
from infra.cluster.whole_cluster import NodeKind, Workload, check_cluster
from infra.config.cluster_config import Taint
from infra.config.errors import NAMESPACE, ConfigError
from plan.stackfile import apply_override, namespace_values
from tests.helpers import raw_config


def assembled(overrides: list[str]) -> Cluster:
    """The tests' dev-shaped config (tests/fixtures) with ``--config`` overrides, each applied as the CLI
    applies it, assembled as the program assembles it."""
    values = {f"{NAMESPACE}:{key}": value for key, value in raw_config("dev").items()}
    for override in overrides:
        apply_override(values, override)
    return assemble(namespace_values(values), "eastus")


AUTOSCALER_OFF = ("addons.balloons.enabled=false", "addons.clusterAutoscaler.enabled=false")


def taint(index: int, pool: int, key: str, value: str, effect: str) -> tuple[str, ...]:
    prefix = f"nodePools[{pool}].taints[{index}]"
    return (f"{prefix}.key={key}", f"{prefix}.value={value}", f"{prefix}.effect={effect}")


# category: (seeded overrides, what the one line says, the valid neighbour's overrides)
CASES = {
    "system add-ons with no node": (
        taint(0, 1, "team", "a", "NoSchedule"),
        "addons.coredns = 'Deployment kube-system/coredns': expected a node kind it fits",
        taint(0, 1, "team", "a", "PreferNoSchedule"),
    ),
    "requests above allocatable": (
        ("addons.monitoring.memoryGiB=64",),
        "pool platform: 1 x memory 64.0Gi > 63.8Gi left of allocatable",
        ("addons.monitoring.memoryGiB=48",),
    ),
    "GPUs nobody advertises": (
        ("addons.nvidiaDevicePlugin.enabled=false",),
        "nodePools[0] = 'pool gpu': expected a DaemonSet providing resource:nvidia.com/gpu on its nodes",
        (),
    ),
    "a start-up taint nobody lifts": (
        ("addons.gpuHealthCheck.enabled=false",),
        "nodePools[0] = 'pool gpu': expected a DaemonSet providing lifts-taint:supercluster.io/gpu-unhealthy on its "
        "nodes: 8 workload pod(s) (nvidia.com/gpu: 1, rdma/ib: 1) cannot run (taint "
        "supercluster.io/gpu-unhealthy=true:NoSchedule not tolerated)",
        (),
    ),
    "InfiniBand nobody advertises": (
        ("addons.rdmaDevicePlugin.enabled=false",),
        "expected a DaemonSet providing resource:rdma/ib on its nodes",
        ("addons.rdmaDevicePlugin.enabled=false", "nodePools[0].infiniband=false"),
    ),
    "no cluster DNS": (
        ("addons.coredns.enabled=false", "addons.nodeLocalDns.enabled=false"),
        "expected working cluster DNS at kubelet's clusterDNS 172.20.0.10",
        ("addons.nodeLocalDns.enabled=false",),
    ),
    "capacity that never arrives": (
        AUTOSCALER_OFF,
        "nodePools[0].minNodes = 0: expected 2 (its maxNodes), or an autoscaler that owns the pool",
        (*AUTOSCALER_OFF, "nodePools[0].minNodes=2", "nodePools[1].minNodes=3", "nodePools[2].minNodes=2"),
    ),
    "a Node Kubernetes refuses": (
        taint(1, 0, "nvidia.com/gpu", "x", "NoSchedule"),
        "nodePools[0].taints = 'nvidia.com/gpu:NoSchedule': expected each key and effect once",
        taint(1, 0, "nvidia.com/gpu", "x", "NoExecute"),
    ),
    "a provision timeout shorter than a join": (
        ("addons.clusterAutoscaler.maxNodeProvisionTime=5m",),
        "maxNodeProvisionTime = '5m': expected more than pool gpu's join time, 333 s",
        ("addons.clusterAutoscaler.maxNodeProvisionTime=6m",),
    ),
    "fewer pod IPs than GPUs": (
        ("nodePools[0].podIpsPerNode=9",),
        "nodePools[0].podIpsPerNode = 9: expected at least 10",
        ("nodePools[0].podIpsPerNode=11",),
    ),
}


@pytest.mark.parametrize("category", CASES)
def test_the_seeded_case_is_refused_and_its_neighbour_plans(category):
    seeded, expected, neighbour = CASES[category]
    with pytest.raises(ConfigError) as caught:
        assembled(list(seeded))
    message = str(caught.value)
    assert "\n" not in message and expected in message, message
    assembled(list(neighbour))


def test_prod_plans_and_its_gpu_nodes_fit_one_pod_per_gpu():
    spec = build_cluster_spec(raw_config("prod"), "eastus")
    for pool in spec.config.node_pools:
        if pool.size.gpus:
            # 2 DaemonSet pods take a pod IP (device plugin, health check), 8 workload pods take the rest.
            assert pool.pod_ips_per_node >= 2 + pool.size.gpus


# ------------------------------------------------------------------ the mechanism, on made-up parts

FPGA = "example.com/fpga"
FPGA_TAINT = Taint("example.com/fpga-unflashed", "true", "NoSchedule")


def fpga_kind(**changes) -> NodeKind:
    """A pool kind the project does not have: FPGA nodes that register with a start-up taint."""
    values = dict(
        name="pool fpga",
        key="nodePools[7]",
        labels={"supercluster.io/role": "fpga"},
        taints=(FPGA_TAINT,),
        startup_taints=(FPGA_TAINT,),
        capacity={"cpu": 16000, "memory": 64 * 2**30, FPGA: 4},
        max_pods=20,
        cluster_dns="10.0.0.10",
        min_nodes=1,
        max_nodes=1,
        work={FPGA: 1},
        work_pods=4,
    )
    values.update(changes)
    return NodeKind(**values)


def agent(name: str, provides: str, **pod) -> Workload:
    spec = {"tolerations": [{"operator": "Exists"}], "containers": [{"name": name}], **pod}
    return Workload(
        f"addons.{name}",
        {
            "kind": "DaemonSet",
            "metadata": {
                "name": name,
                "namespace": "kube-system",
                "annotations": {"supercluster.io/provides": provides},
            },
            "spec": {"template": {"spec": spec}},
        },
    )


AGENTS = [agent("fpga-plugin", f"resource:{FPGA}"), agent("fpga-flasher", f"lifts-taint:{FPGA_TAINT.key}")]
DNS = agent("dns-cache", "dns:10.0.0.10")


def test_a_new_pool_kind_and_its_agents_need_no_new_rule():
    check_cluster([*AGENTS, DNS], [], [fpga_kind()])


@pytest.mark.parametrize(
    ("missing", "expected"),
    [
        ("fpga-plugin", f"a DaemonSet providing resource:{FPGA}"),
        ("fpga-flasher", f"a DaemonSet providing lifts-taint:{FPGA_TAINT.key}"),
    ],
)
def test_a_missing_agent_of_a_new_pool_kind_is_named(missing, expected):
    with pytest.raises(ConfigError, match=expected):
        check_cluster([a for a in AGENTS if a.obj["metadata"]["name"] != missing] + [DNS], [], [fpga_kind()])


def test_an_agent_that_does_not_tolerate_the_kind_it_is_meant_for_is_named():
    picky = agent("fpga-plugin", f"resource:{FPGA}", tolerations=[], nodeSelector={"supercluster.io/role": "fpga"})
    with pytest.raises(ConfigError, match="DaemonSet kube-system/fpga-plugin.*pool fpga .*not tolerated"):
        check_cluster([picky, AGENTS[1], DNS], [], [fpga_kind()])


def test_more_workload_pods_than_max_pods_is_named():
    with pytest.raises(ConfigError, match="maxPods 5 leaves 2 pod slot"):
        check_cluster([*AGENTS, DNS], [], [fpga_kind(max_pods=5)])
