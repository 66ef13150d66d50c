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
from tests.helpers import raw_stack

GO = Path(__file__).with_name("go")


def module_version(module_dir: str, path: str) -> str:
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
