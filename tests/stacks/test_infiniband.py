"""The InfiniBand job path, read across the whole plan: domains nodes register, RDMA they advertise,
and a job built for a pool that names exactly those.

The e2e twin (tests/e2e/test_infiniband.py) boots a plan with two InfiniBand domains on the real
scheduler and shows a gang landing inside one of them.
"""

from __future__ import annotations

import json

import pytest
import yaml

from infra.addons import rdma_device_plugin
from infra.cluster.cluster_spec import build_cluster_spec
from infra.facts.labels import (
    GPU_COUNT_LABEL,
    GPU_RESOURCE,
    INFINIBAND_DOMAIN_LABEL,
    INFINIBAND_LABEL,
    POOL_LABEL,
    RDMA_RESOURCE,
)
from infra.facts.tags import LABEL_PREFIX as LABEL_TAG_PREFIX
from infra.node import seccomp
from infra.node.pool import encode_tag_key
from plan.artifacts import cloud_init_files, kubernetes_object
from plan.infiniband_job import NCCL_ENV, infiniband_job
from tests import k8s_schema
from tests.helpers import raw_stack
from tests.stacks.test_node_vocabulary import fits, registered_nodes

VMSS = "azure-native:compute:VirtualMachineScaleSet"
CONTAINERD_UNIT = "/etc/systemd/system/containerd.service"


def _shard(run, registration) -> str:
    return registration.name.removeprefix(f"{run.stack}-pool-")


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_infiniband_node_registers_its_scale_set_as_its_domain(stack, dev_plan, prod_plan):
    run = {"dev": dev_plan, "prod": prod_plan}[stack]
    nodes = registered_nodes(run)
    infiniband = [r for r in run.node_scale_sets() if r.inputs["singlePlacementGroup"]]
    assert infiniband, "the stack has InfiniBand pools"
    for vmss in run.node_scale_sets():
        labels, _ = nodes[vmss.name]
        if vmss in infiniband:
            assert labels[INFINIBAND_LABEL] == "true"
            assert labels[INFINIBAND_DOMAIN_LABEL] == _shard(run, vmss), vmss.name
            # A node the autoscaler plans from zero knows its domain too.
            assert vmss.inputs["tags"][LABEL_TAG_PREFIX + encode_tag_key(INFINIBAND_DOMAIN_LABEL)] == _shard(run, vmss)
        else:
            assert INFINIBAND_DOMAIN_LABEL not in labels and INFINIBAND_LABEL not in labels, vmss.name
    domains = [nodes[v.name][0][INFINIBAND_DOMAIN_LABEL] for v in infiniband]
    assert len(domains) == len(set(domains)), "two scale sets share a domain"


def test_only_infiniband_nodes_lift_the_memlock_limit_rdma_needs(prod_plan):
    for vmss in prod_plan.node_scale_sets():
        files = cloud_init_files(vmss)
        lifted = "LimitMEMLOCK=infinity" in files[CONTAINERD_UNIT].splitlines()
        assert lifted == vmss.inputs["singlePlacementGroup"], vmss.name


def _object(run, kind: str, name: str) -> dict:
    (found,) = [
        o
        for o in map(kubernetes_object, run.registrations)
        if o is not None and o["kind"] == kind and o["metadata"]["name"] == name
    ]
    return found


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_rdma_plugin_runs_on_every_infiniband_node_and_advertises_the_resource_jobs_request(
    stack, dev_plan, prod_plan
):
    run = {"dev": dev_plan, "prod": prod_plan}[stack]
    daemon_set = _object(run, "DaemonSet", rdma_device_plugin.NAME)
    pod = daemon_set["spec"]["template"]["spec"]
    nodes = registered_nodes(run)
    for name, (labels, taints) in nodes.items():
        assert fits(pod, labels, taints) == (labels.get(INFINIBAND_LABEL) == "true"), name
    config_map = _object(run, "ConfigMap", rdma_device_plugin.CONFIG_MAP)
    (resource,) = json.loads(config_map["data"]["config.json"])["configList"]
    assert f"{rdma_device_plugin.RESOURCE_PREFIX}/{resource['resourceName']}" == RDMA_RESOURCE
    assert resource["selectors"] == {"vendors": ["15b3"], "linkTypes": ["infiniband"]}
    mounted = {v["name"]: v for v in pod["volumes"]}["config"]["configMap"]["name"]
    assert mounted == config_map["metadata"]["name"]


def test_a_job_for_a_pool_fits_its_nodes_requests_what_they_advertise_and_keeps_to_one_domain(prod_plan):
    spec = build_cluster_spec(raw_stack("prod"), "eastus")
    pool = spec.config.pool("h100a")
    objects = infiniband_job(name="run1", namespace="team-a", pool=pool, nodes=4, image="img", command=["x"])
    group, service, job = objects
    assert group["spec"]["minMember"] == job["spec"]["parallelism"] == job["spec"]["completions"] == 4
    pod = job["spec"]["template"]["spec"]
    nodes = registered_nodes(prod_plan)
    pool_nodes = [(labels, taints) for labels, taints in nodes.values() if labels.get(POOL_LABEL) == "h100a"]
    assert pool_nodes and all(fits(pod, labels, taints) for labels, taints in pool_nodes)
    assert not any(fits(pod, labels, taints) for labels, taints in nodes.values() if labels.get(POOL_LABEL) != "h100a")
    (term,) = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == INFINIBAND_DOMAIN_LABEL
    assert all(INFINIBAND_DOMAIN_LABEL in labels for labels, _ in pool_nodes)
    assert term["labelSelector"]["matchLabels"] == job["spec"]["template"]["metadata"]["labels"]
    (container,) = pod["containers"]
    limits = container["resources"]["limits"]
    assert limits[RDMA_RESOURCE] == 1
    assert all(limits[GPU_RESOURCE] == int(labels[GPU_COUNT_LABEL]) for labels, _ in pool_nodes)
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert NCCL_ENV.items() <= env.items()
    # Nothing Pod Security's baseline level refuses: a tenant namespace can run it.
    assert not pod.get("hostNetwork") and not any("hostPath" in v for v in pod["volumes"])
    assert "securityContext" not in container
    # The ranks bind memory to NUMA nodes: the profile every node carries, which baseline admits.
    assert pod["securityContext"]["seccompProfile"] == {"type": "Localhost", "localhostProfile": seccomp.NUMA_PROFILE}
    assert seccomp.NUMA_PROFILE == "supercluster/numa.json"
    assert service["spec"]["clusterIP"] == "None" and pod["subdomain"] == service["metadata"]["name"]
    for document in (service, job):  # the PodGroup is a CRD: the e2e twin has the real apiserver accept it
        k8s_schema.validate(document, spec.config.kubernetes_version, strict=True)


def test_a_job_refuses_a_pool_without_infiniband_or_more_nodes_than_a_domain_holds():
    spec = build_cluster_spec(raw_stack("prod"), "eastus")
    with pytest.raises(ValueError, match="pool cpu has no InfiniBand"):
        infiniband_job(name="r", namespace="t", pool=spec.config.pool("cpu"), nodes=2, image="i", command=["x"])
    with pytest.raises(ValueError, match="nodes 101: expected 1 to 100"):
        infiniband_job(name="r", namespace="t", pool=spec.config.pool("h100a"), nodes=101, image="i", command=["x"])


@pytest.mark.slow  # three interpreter starts, each planning prod
def test_the_job_command_prints_the_job_for_a_pool_of_the_stack_and_refuses_bad_arguments_in_one_line():
    import subprocess
    import sys

    from plan.stackfile import PROJECT_DIR

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "plan.job",
                "--stack",
                "prod",
                "--name",
                "run1",
                "--namespace",
                "team-a",
                "--image",
                "img",
                *argv,
            ],
            capture_output=True,
            text=True,
            cwd=PROJECT_DIR,
            timeout=120,
        )

    printed = run("--pool", "h100a", "--nodes", "4", "--", "torchrun", "train.py")
    assert printed.returncode == 0, printed.stderr
    pool = build_cluster_spec(raw_stack("prod"), "eastus").config.pool("h100a")
    assert list(yaml.safe_load_all(printed.stdout)) == infiniband_job(
        name="run1", namespace="team-a", pool=pool, nodes=4, image="img", command=["torchrun", "train.py"]
    )
    for argv, message in (
        (("--pool", "cpu", "--nodes", "2", "x"), "pool cpu has no InfiniBand"),
        (("--pool", "nope", "--nodes", "2", "x"), "--pool nope: expected a pool of stack prod"),
    ):
        refused = run(*argv)
        assert refused.returncode == 2 and message in refused.stderr.strip().splitlines()[-1], refused.stderr
