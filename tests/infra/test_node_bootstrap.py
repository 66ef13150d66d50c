"""The node's rendered files, one test per setting the posts and the issue ask for (no Pulumi)."""

from __future__ import annotations

import json
import tomllib

import pytest

import machine
from infra.boot import local_disk
from infra.boot.cloudinit import CloudConfig, custom_data, render
from infra.boot.secret_names import NODE_JOIN_FILES
from infra.config import naming
from infra.config.cluster_config import Taint
from infra.facts.labels import ROLE_CPU, ROLE_GPU, node_labels
from infra.node import NodeSpec, containerd, gpu, kube_proxy, kubelet, node_cloud_config, pinned_images, sysctls
from infra.node.kubelet_fields import unknown_fields
from infra.node.state_disk import LocalDisks
from tests.helpers import load_yaml


def spec(**changes) -> NodeSpec:
    values = dict(
        kubernetes_version="1.33.4",
        apiserver_endpoint="https://10.0.0.68:6443",
        cluster_dns="172.20.0.10",
        cluster_cidr="10.0.0.0/8",
        vault_name="prod-kv-123456",
        identity=naming.role_identity_below_subscription("prod", "node"),
        registry_login_server="prodacr123456.azurecr.io",
        images=("registry.k8s.io/pause:3.10", "nvcr.io/nvidia/pytorch:24.05-py3"),
        local_disks=LocalDisks(nvme_disks=8),
        vcpus=96,
        max_pods=8,
        labels=node_labels(role=ROLE_GPU, pool="h100a", gpus=8, extra={"supercluster.io/team": "research"}),
        taints=(Taint("nvidia.com/gpu", "present", "NoSchedule"),),
        gpus=8,
        nvswitch=True,
    )
    values.update(changes)
    return NodeSpec(**values)


def files(node: NodeSpec, **kwargs) -> dict[str, str]:
    return {f.path: f.content for f in node_cloud_config(node, **kwargs).files}


def kubelet_config(node: NodeSpec) -> dict:
    return load_yaml(files(node)[kubelet.CONFIG_PATH])


def sysctl_values(node: NodeSpec) -> dict[str, int]:
    text = files(node)[sysctls.SYSCTL_PATH]
    pairs = (line.split(" = ") for line in text.splitlines() if " = " in line and not line.startswith("#"))
    return {key: int(value) for key, value in pairs}


# ------------------------------------------------------------------ sysctls


def test_arp_cache_thresholds_from_the_2500_node_post():
    values = sysctl_values(spec())
    assert values["net.ipv4.neigh.default.gc_thresh1"] == 80_000
    assert values["net.ipv4.neigh.default.gc_thresh2"] == 90_000
    assert values["net.ipv4.neigh.default.gc_thresh3"] == 100_000


@pytest.mark.parametrize("vcpus,expected", [(4, 131_072), (16, 524_288), (96, 2_097_152)])
def test_conntrack_follows_kube_proxys_rule_within_azures_range(vcpus, expected):
    values = sysctl_values(spec(vcpus=vcpus))
    assert values["net.netfilter.nf_conntrack_max"] == expected
    assert 65_536 <= values["net.netfilter.nf_conntrack_buckets"] <= 524_288
    # ... and kube-proxy leaves it alone, so the sysctl file is its only owner.
    assert kube_proxy.config("10.0.0.0/8")["conntrack"] == {"maxPerCore": 0, "min": 0}


def test_inotify_and_map_count_and_forwarding():
    values = sysctl_values(spec())
    assert values["fs.inotify.max_user_watches"] == 1_048_576
    assert values["vm.max_map_count"] == 1_048_576
    assert values["net.ipv4.ip_forward"] == 1 and values["net.bridge.bridge-nf-call-iptables"] == 1
    assert "br_netfilter" in files(spec())[sysctls.MODULES_PATH].split()


def test_sysctls_satisfy_kubelets_protect_kernel_defaults():
    values = sysctl_values(spec())
    assert kubelet_config(spec())["protectKernelDefaults"] is True
    # kubernetes pkg/util/sysctl: the values kubelet refuses to start without.
    assert {key: values[key] for key in sysctls.KUBELET_KERNEL_DEFAULTS} == {
        "vm.overcommit_memory": 1,
        "vm.panic_on_oom": 0,
        "kernel.panic": 10,
        "kernel.panic_on_oops": 1,
        "kernel.keys.root_maxkeys": 1_000_000,
        "kernel.keys.root_maxbytes": 25_000_000,
    }


# ------------------------------------------------------------------ kubelet


def test_kubelet_config_is_a_valid_kubelet_configuration():
    document = kubelet_config(spec())
    assert document["apiVersion"] == "kubelet.config.k8s.io/v1beta1"
    assert document["kind"] == "KubeletConfiguration"
    assert unknown_fields(document) == []


def test_field_check_catches_a_typo():
    assert unknown_fields({"serialiseImagePulls": False, "authentication": {"anonymus": {}}}) == [
        "serialiseImagePulls",
        "authentication.anonymus",
    ]


def test_kubelet_pulls_in_parallel():
    document = kubelet_config(spec())
    assert document["serializeImagePulls"] is False
    assert document["maxParallelImagePulls"] == containerd.MAX_CONCURRENT_DOWNLOADS == 10


def test_kubelet_max_pods_is_the_pod_ip_count():
    assert kubelet_config(spec(max_pods=16))["maxPods"] == 16


def test_kubelet_is_locked_down():
    document = kubelet_config(spec())
    assert document["authentication"]["anonymous"] == {"enabled": False}
    assert document["authentication"]["webhook"] == {"enabled": True}
    assert document["authentication"]["x509"]["clientCAFile"] == "/etc/kubernetes/pki/ca.crt"
    assert document["authorization"] == {"mode": "Webhook"}
    assert document["readOnlyPort"] == 0
    assert document["rotateCertificates"] is True


def test_kubelet_uses_cluster_dns_and_systemd_cgroups():
    document = kubelet_config(spec())
    assert document["clusterDNS"] == ["172.20.0.10"]
    assert document["cgroupDriver"] == "systemd"
    assert document["containerRuntimeEndpoint"] == "unix:///run/containerd/containerd.sock"


def test_join_by_tls_bootstrap_with_the_token_file_from_key_vault():
    node_files = files(spec())
    bootstrap = load_yaml(node_files[kubelet.BOOTSTRAP_KUBECONFIG])
    token_path = next(f.path for f in NODE_JOIN_FILES if f.secret_name == "node-bootstrap-token")
    assert bootstrap["users"][0]["user"] == {"tokenFile": token_path}
    assert bootstrap["clusters"][0]["cluster"]["server"] == "https://10.0.0.68:6443"
    unit = node_files["/etc/systemd/system/kubelet.service"]
    assert f"--bootstrap-kubeconfig={kubelet.BOOTSTRAP_KUBECONFIG}" in unit
    assert "--config-dir=/etc/kubernetes/kubelet.conf.d" in unit  # the providerID drop-in
    fetch = node_files["/usr/local/sbin/supercluster-fetch-secrets"]
    assert "fetch node-bootstrap-token /etc/kubernetes/bootstrap-token 0600" in fetch
    assert "fetch cluster-ca-crt /etc/kubernetes/pki/ca.crt" in fetch


def test_labels_and_taints_from_config_reach_kubelet():
    document = kubelet_config(spec(gpus=0))
    assert document["registerWithTaints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    unit = files(spec())["/etc/systemd/system/kubelet.service"]
    assert "supercluster.io/team=research" in unit


def test_customdata_never_carries_a_secret():
    text = render(node_cloud_config(spec()))
    assert "BEGIN" not in text and "PRIVATE KEY" not in text
    assert "token:" not in text  # kubeconfigs name the token file, never a token


# ------------------------------------------------------------------ containerd


def containerd_config(node: NodeSpec) -> dict:
    return tomllib.loads(files(node)[containerd.CONFIG_PATH])


def test_containerd_pull_settings_from_the_post():
    cri = containerd_config(spec())["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["max_concurrent_downloads"] == 10
    assert cri["image_pull_progress_timeout"] == "30m"


def test_containerd_state_on_the_local_ssd_and_systemd_cgroups():
    document = containerd_config(spec(gpus=0))
    assert document["version"] == 2
    assert document["root"] == "/var/lib/local-ssd/containerd"
    runc = document["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["runc"]
    assert runc["options"]["SystemdCgroup"] is True


def test_sandbox_image_is_the_preloaded_pinned_pause_image():
    cri = containerd_config(spec())["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == "registry.k8s.io/pause:3.10"
    preload = json.loads(files(spec())["/etc/supercluster/preload-images.json"])
    assert preload["images"][0] == {
        "source": "registry.k8s.io/pause:3.10",
        "archive": pinned_images.archive_path("registry.k8s.io/pause:3.10"),
        "cached": "prodacr123456.azurecr.io/k8s/pause:3.10",
    }
    assert preload["images"][1]["cached"] == "prodacr123456.azurecr.io/nvcr/nvidia/pytorch:24.05-py3"
    script = files(spec())["/usr/local/sbin/supercluster-preload-images"]
    assert "io.cri-containerd.pinned=pinned" in script


def test_preload_runs_before_kubelet():
    unit = files(spec())["/etc/systemd/system/supercluster-preload-images.service"]
    assert "Before=kubelet.service" in unit and "After=containerd.service" in unit


# ------------------------------------------------------------------ local disks


def test_state_dirs_on_local_disks_with_raid0_for_several_nvme():
    node_files = files(spec())
    settings = json.loads(node_files[local_disk.SETTINGS_PATH])
    assert settings["nvme_disks"] == 8 and settings["mount"] == "/var/lib/local-ssd"
    assert settings["bind_dirs"] == [["kubelet", "/var/lib/kubelet"], ["pod-logs", "/var/log/pods"]]
    assert node_files[local_disk.SCRIPT_PATH] == machine.source(local_disk.PROGRAM)  # the one program
    assert (
        "Before=containerd.service kubelet.service" in node_files["/etc/systemd/system/supercluster-local-disk.service"]
    )
    assert node_cloud_config(spec()).mounts == []


def test_temp_disk_sizes_keep_cloud_init_off_the_temp_disk():
    cloud = node_cloud_config(spec(local_disks=LocalDisks(nvme_disks=0), gpus=0))
    assert cloud.mounts == [["ephemeral0"]]
    assert json.loads({f.path: f.content for f in cloud.files}[local_disk.SETTINGS_PATH])["nvme_disks"] == 0


# ------------------------------------------------------------------ GPU


def test_gpu_nodes_register_with_the_unhealthy_taint_and_gpu_labels():
    document = kubelet_config(spec())
    assert {"key": "supercluster.io/gpu-unhealthy", "value": "true", "effect": "NoSchedule"} in document[
        "registerWithTaints"
    ]
    unit = files(spec())["/etc/systemd/system/kubelet.service"]
    assert "kubernetes.azure.com/accelerator=nvidia" in unit and "nvidia.com/gpu.present=true" in unit
    requires = next(line for line in unit.splitlines() if line.startswith("Requires="))
    assert gpu.UNIT in requires  # no GPUs seen, no node
    runtimes = containerd_config(spec())["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    assert runtimes["default_runtime_name"] == "nvidia"
    assert "nvidia-fabricmanager.service" in files(spec())[f"/etc/systemd/system/{gpu.UNIT}"]


def test_cpu_nodes_have_no_gpu_taint_labels_or_runtime():
    node = spec(gpus=0, nvswitch=False, taints=(), labels=node_labels(role=ROLE_CPU, pool="cpu"))
    assert kubelet_config(node)["registerWithTaints"] == []
    assert "accelerator" not in files(node)["/etc/systemd/system/kubelet.service"]
    assert f"/etc/systemd/system/{gpu.UNIT}" not in files(node)
    assert (
        containerd_config(node)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["default_runtime_name"] == "runc"
    )


# ------------------------------------------------------------------ kube-proxy, boot order, size


def test_kube_proxy_runs_nftables_with_the_cluster_cidr():
    document = load_yaml(files(spec())[kube_proxy.CONFIG_PATH])
    assert document["kind"] == "KubeProxyConfiguration" and document["mode"] == "nftables"
    assert document["clusterCIDR"] == "10.0.0.0/8"
    kubeconfig = load_yaml(files(spec())[kube_proxy.KUBECONFIG])
    assert kubeconfig["users"][0]["user"]["client-certificate"] == kubelet.CLIENT_CERT


def test_before_kubelet_hooks_run_before_kubelet_is_started():
    def hook(cloud: CloudConfig) -> None:
        cloud.add("/etc/supercluster/hook", "x\n")
        cloud.runcmd.append(["echo", "hook"])

    cloud = node_cloud_config(spec(), before_kubelet=[hook])
    assert "/etc/supercluster/hook" in {f.path for f in cloud.files}
    start = next(i for i, cmd in enumerate(cloud.runcmd) if kubelet.UNIT in cmd)
    assert cloud.runcmd.index(["echo", "hook"]) < start


def test_the_biggest_node_fits_azures_custom_data_limit():
    # A GPU node with every kind of file, 40 labels, 30 preload images and a large hook still fits.
    labels = {f"supercluster.io/label-{i:02d}": "x" * 63 for i in range(40)}
    images = tuple(f"nvcr.io/nvidia/image-{i:02d}:24.05-py3" for i in range(30))
    node = spec(labels=labels, images=("registry.k8s.io/pause:3.10", *images))
    encoded = custom_data(
        render(node_cloud_config(node, before_kubelet=[lambda cloud: cloud.add("/etc/hook", "y" * 4000)])),
        "biggest node",
    )
    assert len(encoded) < 87_380
