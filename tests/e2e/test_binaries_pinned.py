"""The harness boots exactly the versions the cluster runs (a fast test: it reads go.mod, builds nothing).

tests/e2e/go/*/go.mod pin what scripts/build-binaries.sh builds; the stacks pin
``kubernetesVersion``, infra/catalog/versions.py the etcd release, the scheduler-plugins build for each
Kubernetes minor and the node runtime (containerd, runc, CNI plugins), and the add-on images table
CoreDNS. A bump on one side without the other fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from infra.addons import images as addon_images
from infra.catalog import versions
from infra.catalog.image_refs import parse_image
from infra.day2.deploy_rules import LastDeploy, check_kubernetes_upgrade
from plan.stackfile import stack_cluster_spec
from tests.helpers import raw_stack

GO = Path(__file__).with_name("go")
# The release the staged-upgrade scenario moves the box to (scripts/build-upgrade-binaries.sh builds it).
UPGRADE = Path(__file__).with_name("go-upgrade") / "kubernetes"


def module_version(module_dir: str | Path, path: str) -> str:
    """The version the module graph resolves ``path`` to: its ``replace`` if there is one, else its ``require``."""
    text = (GO / module_dir / "go.mod").read_text()
    replaced = re.search(rf"^\s*{re.escape(path)} => {re.escape(path)} (v\S+)$", text, re.M)
    required = re.search(rf"^\s*{re.escape(path)} (v\S+)(?: // indirect)?$", text, re.M)
    match = replaced or required
    assert match, f"{path} is not in {module_dir}/go.mod"
    return match.group(1)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_kubernetes_and_scheduler_plugins_are_the_stacks_versions(stack):
    kubernetes = raw_stack(stack)["kubernetesVersion"]
    assert module_version("kubernetes", "k8s.io/kubernetes") == f"v{kubernetes}"
    minor = ".".join(kubernetes.split(".")[:2])
    assert (
        module_version("kubernetes", "sigs.k8s.io/scheduler-plugins")
        == versions.SCHEDULER_PLUGINS_BY_KUBERNETES_MINOR[minor][0]
    )
    # Every staging module at the release that matches kubernetesVersion (v1.X.Y -> v0.X.Y).
    staging = re.findall(r"^\s*(k8s\.io/\S+) => \S+ (v\S+)$", (GO / "kubernetes" / "go.mod").read_text(), re.M)
    assert staging and {v for m, v in staging if m != "k8s.io/kubernetes"} == {"v0" + kubernetes[1:]}


def test_etcd_is_the_release_the_etcd_vms_run():
    assert module_version("etcd", "go.etcd.io/etcd/server/v3") == f"v{versions.ETCD_VERSION}"
    assert module_version("etcd", "go.etcd.io/etcd/etcdctl/v3") == f"v{versions.ETCD_VERSION}"


def test_the_node_runtime_is_what_the_nodes_install():
    # infra/node/install.py installs these releases; the box's real nodes run the same.
    assert module_version("containerd", "github.com/containerd/containerd") == f"v{versions.CONTAINERD_VERSION}"
    assert module_version("runc", "github.com/opencontainers/runc") == versions.RUNC_VERSION
    assert module_version("cni", "github.com/containernetworking/plugins") == versions.CNI_PLUGINS_VERSION


def test_coredns_is_the_release_the_addon_runs():
    tag = parse_image(addon_images.COREDNS).tag
    assert module_version("coredns", "github.com/coredns/coredns") == tag


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_upgrade_binaries_are_the_next_minor_the_program_allows(stack):
    """The upgrade scenario's release is one the program accepts as the stack's next step (the config's
    published releases, the skew rules' one minor at a time), and a minor up: a patch release would test no
    skew, and two minors up the program refuses (tests/stacks/test_day2_rollout.py)."""
    running = raw_stack(stack)["kubernetesVersion"]
    target = module_version(UPGRADE, "k8s.io/kubernetes").removeprefix("v")
    assert int(target.split(".")[1]) == int(running.split(".")[1]) + 1, (running, target)
    last = LastDeploy(cluster_name=stack, kubernetes_version=running)
    check_kubernetes_upgrade(last, stack_cluster_spec(stack, [f"kubernetesVersion={target}"]).config)
    staging = re.findall(r"^\s*(k8s\.io/\S+) => \S+ (v\S+)$", (UPGRADE / "go.mod").read_text(), re.M)
    assert staging and {v for m, v in staging if m != "k8s.io/kubernetes"} == {"v0" + target[1:]}
