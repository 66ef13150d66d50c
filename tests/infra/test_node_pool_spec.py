"""From a configured pool to its scale sets' decisions: images, tags, placement, pins (no Pulumi)."""

from __future__ import annotations

import pytest

from infra.assembly import machine_image
from infra.assembly.machine_image import kind_of_pool
from infra.catalog import versions
from infra.catalog.image_refs import cache_prefixes, parse_image
from infra.cluster.cluster_spec import build_cluster_spec
from infra.config.cluster_config import parse_config
from infra.config.errors import ConfigError
from infra.config.sizing import shards
from infra.node import install
from infra.node.pool import (
    MAX_TAGS,
    ScaleSetShape,
    autoscaler_tags,
    encode_tag_key,
    ephemeral_os_disk,
    scale_set_tags,
)
from tests.helpers import parsed, pool_node_spec, raw_config


def cluster(stack: str = "prod", raw: dict | None = None):
    return build_cluster_spec(raw or raw_config(stack), "eastus")


def test_node_spec_from_the_prod_gpu_pool():
    spec = cluster()
    pool = spec.config.pool("h100a")
    node = pool_node_spec(spec, pool, 1, host_network_pods=5)
    assert node.apiserver_endpoint == f"https://{spec.addresses.apiserver_lb_ip()}:6443"
    assert node.cluster_dns == "172.20.0.10"
    # kubelet's maxPods: the pod IPs plus the host-network DaemonSet pods, which take no pod IP.
    assert pool.pod_ips_per_node == 10 and node.max_pods == 10 + 5
    assert node.gpus == 8 and node.nvswitch and node.local_disks.nvme_disks == 8
    assert node.images[0] == versions.PAUSE_IMAGE
    assert node.labels["supercluster.io/pool"] == "h100a" and node.labels["supercluster.io/infiniband"] == "true"
    assert node.labels["supercluster.io/infiniband-domain"] == "h100a-s001"


def test_gpu_pools_boot_the_hpc_image_and_cpu_pools_ubuntu():
    config = parsed("prod")
    assert machine_image.BASE_IMAGES[kind_of_pool(config.pool("h100a"))] == versions.UBUNTU_HPC_IMAGE
    assert machine_image.BASE_IMAGES[kind_of_pool(config.pool("cpu"))] == versions.UBUNTU_IMAGE


def test_ephemeral_os_disk_only_where_the_temp_disk_is_free():
    config = parsed("prod")
    assert ephemeral_os_disk(config.pool("h100a"))  # state on 8 NVMe, OS on the 1 TB temp disk
    assert not ephemeral_os_disk(config.pool("cpu"))  # the temp disk is the state disk


def test_infiniband_shards_use_one_placement_group_and_fault_domain():
    config = parsed("prod")
    assert ScaleSetShape.of(config.pool("h100a")) == ScaleSetShape(True, 1)
    assert ScaleSetShape.of(config.pool("cpu")) == ScaleSetShape(False, None)


def test_autoscaler_tags_for_auto_discovery_and_scale_from_zero():
    config = parsed("dev")
    pool = config.pool("gpu")
    tags = autoscaler_tags(config, pool, shards(pool)[0])
    assert tags["cluster-autoscaler-enabled"] == "true" and tags["cluster-autoscaler-name"] == "dev"
    assert (tags["min"], tags["max"]) == ("0", "2")
    assert tags["k8s.io_cluster-autoscaler_node-template_label_supercluster.io_team"] == "research"
    assert tags["k8s.io_cluster-autoscaler_node-template_label_kubernetes.azure.com_accelerator"] == "nvidia"
    assert tags["k8s.io_cluster-autoscaler_node-template_taint_nvidia.com_gpu"] == "present:NoSchedule"
    # The start-up taint is not a lasting one: with it the autoscaler would never scale up for GPU pods.
    assert not any("gpu-unhealthy" in key for key in tags)
    assert all("/" not in key for key in scale_set_tags(config, pool, shards(pool)[0], "abc"))


def test_tag_key_encoding_matches_the_autoscalers_decoding():
    assert encode_tag_key("nvidia.com/gpu") == "nvidia.com_gpu"
    assert encode_tag_key("example.com/my_label") == "example.com_my~2label"


def test_retired_pool_has_max_zero():
    raw = raw_config("dev")
    raw["nodePools"][1]["retired"] = True
    config = parse_config(raw, "eastus")
    pool = config.pool("cpu")
    tags = autoscaler_tags(config, pool, shards(pool)[0])
    assert (tags["min"], tags["max"]) == ("0", "0")


def test_too_many_labels_for_azures_tag_limit_is_a_config_error():
    raw = raw_config("dev")
    raw["nodePools"][1]["labels"] = {f"team{i}": "x" for i in range(MAX_TAGS)}
    with pytest.raises(ConfigError, match=r"nodePools\[1\].labels .* over Azure's 50"):
        cluster(raw=raw)


def test_kubelet_reserved_label_namespaces_are_refused():
    raw = raw_config("dev")
    raw["nodePools"][1]["labels"] = {"node-role.kubernetes.io/worker": "true"}
    with pytest.raises(ConfigError, match=r"labels.node-role.kubernetes.io/worker = 'true'"):
        parse_config(raw, "eastus")
    raw["nodePools"][1]["labels"] = {"node.kubernetes.io/lifecycle": "spot"}
    assert parse_config(raw, "eastus").pool("cpu").labels == {"node.kubernetes.io/lifecycle": "spot"}


@pytest.mark.parametrize(
    "reference", ["pause:3.10", "registry.k8s.io/pause", "example.com/app:1", "registry.k8s.io/Pause:3.10"]
)
def test_preload_images_must_be_pinned_and_cacheable(reference):
    raw = raw_config("dev")
    raw["images"] = {"preload": [reference]}
    with pytest.raises(ConfigError, match=r"images.preload\[0\]"):
        parse_config(raw, "eastus")


def test_image_references_map_to_cache_rules():
    ref = parse_image("docker.io/library/python:3.12@sha256:" + "a" * 64)
    assert ref.cached_in("x.azurecr.io") == "x.azurecr.io/docker/library/python:3.12@sha256:" + "a" * 64
    assert cache_prefixes(["registry.k8s.io/pause:3.10", "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"]) == {
        "k8s": "registry.k8s.io",
        "nvcr": "nvcr.io",
    }


def test_install_manifest_pins_every_binary():
    artifacts = {a["name"]: a for a in install.manifest("1.33.4")["artifacts"]}
    assert set(artifacts) == {"containerd", "runc", "cni-plugins", "azure-cni", "kubelet", "kube-proxy"}
    assert artifacts["containerd"]["sha256"] == versions.CONTAINERD_SHA256
    assert (
        f"/v{versions.CONTAINERD_VERSION}/containerd-{versions.CONTAINERD_VERSION}-linux-amd64.tar.gz"
        in artifacts["containerd"]["url"]
    )
    assert artifacts["kubelet"]["url"] == "https://dl.k8s.io/v1.33.4/bin/linux/amd64/kubelet"
    assert artifacts["kubelet"]["sha256_url"] == artifacts["kubelet"]["url"] + ".sha256"
    assert artifacts["azure-cni"]["version_expect"] == f"Azure CNI Version {versions.AZURE_CNI_VERSION}\n"
    assert all(a.get("sha256") or a.get("sha256_url") for name, a in artifacts.items() if name != "azure-cni")
