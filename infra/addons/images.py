"""Every add-on's container image, in one table, and the one way a pod names it.

Each reference carries the manifest digest it is pulled by (``name:tag@sha256:...``; the tag
stays only so a reader sees the release). A digest here is never computed on this machine
(no registry is reachable where the program is planned): each one is copied from the
public source named beside it, and a reference no public source pins for that exact tag is
listed in ``AWAITING_DIGEST`` instead of carrying a guessed digest (a wrong digest stops every
pull; an invented one would be worse). tests/stacks/test_addon_images.py lists every image
of the rendered plan that still lacks a digest.

No pod pulls from a public registry: ``in_cluster_registry`` turns an upstream reference into
its copy in the cluster's Azure Container Registry (``<acr>.azurecr.io/<cache prefix>/...``,
the registry's artifact-cache rules, infra/catalog/image_refs.py), and ``build_addon_objects`` passes every
container of every add-on through it, so a new add-on cannot forget to.
"""

from __future__ import annotations

from infra.catalog import versions
from infra.catalog.image_refs import parse_image

# registry.k8s.io digests: the Kubernetes image promoter's manifests, kubernetes/k8s.io
# registry.k8s.io/images/<staging project>/images.yaml ("dmap": digest -> tags), which is what
# registry.k8s.io serves. Staging project named on each line.
# The CoreDNS kubeadm 1.33 installs (k8s-staging-coredns/images.yaml).
COREDNS = (
    "registry.k8s.io/coredns/coredns:v1.12.0@sha256:40384aa1f5ea6bfdc77997d243aec73da05f27aed0c5e9d65bfa98933c519d97"
)
# kubernetes/kubernetes cluster/addons/dns/nodelocaldns/nodelocaldns.yaml (k8s-staging-dns/images.yaml).
NODE_LOCAL_DNS = (
    "registry.k8s.io/dns/k8s-dns-node-cache:1.26.4"
    "@sha256:ab52729d7292fbdf764f21daa7b8ba89fd985ac43cec0a13d035a6942d4c1be8"
)
# k8s-staging-cpa/images.yaml.
CLUSTER_PROPORTIONAL_AUTOSCALER = (
    "registry.k8s.io/cpa/cluster-proportional-autoscaler:v1.9.0"
    "@sha256:8f3b4e4beb62a9a5ad1ff96712129996e614d1fe7c57739c9816545ecea6f8b6"
)
# cluster-autoscaler supports exactly one Kubernetes minor per release (its README, "Releases"): the
# image follows the cluster's kubernetesVersion. Digests from k8s-staging-autoscaling/images.yaml, whose
# stored copy ends at v1.33.1: 1.33 runs v1.33.1 (not a later patch) for that reason, and 1.34 has no
# digest a public source pins, so it waits in AWAITING_DIGEST.
CLUSTER_AUTOSCALER = {
    "1.31": (
        "registry.k8s.io/autoscaling/cluster-autoscaler:v1.31.1"
        "@sha256:b1d8dff49af7a66389daa7ac0dcd19d484067403c215801c30bb5871e47fce77"
    ),
    "1.32": (
        "registry.k8s.io/autoscaling/cluster-autoscaler:v1.32.2"
        "@sha256:c627d8d159a8cd6705a2612afd8a9ffc499e2fc37bad3525364427439b9224c0"
    ),
    "1.33": (
        "registry.k8s.io/autoscaling/cluster-autoscaler:v1.33.1"
        "@sha256:0d53371b73eae57dbed927a72b71d4fe756ce4dbfe528b4217a1078cb13445f0"
    ),
    "1.34": "registry.k8s.io/autoscaling/cluster-autoscaler:v1.34.5",
}
# The digests below come from no promoter manifest: each is the one several unrelated public
# repositories pin for this exact tag (Dockerfiles, compose files and manifests found by code
# search, which agree with each other); checked nowhere else.
NVIDIA_DEVICE_PLUGIN = (
    "nvcr.io/nvidia/k8s-device-plugin:v0.17.1@sha256:af31e2b7c7f89834c4e5219860def7ac2e49a207b3d4e8610d5a26772b7738e5"
)
# The RDMA shared device plugin at the version NVIDIA's network operator deploys in its sample
# NicClusterPolicy (Mellanox/network-operator, "rdmaSharedDevicePlugin"). Digest from NVIDIA's
# Network Operator documentation, "NVIDIA Network Operator Container Images"
# (Mellanox/network-operator-docs/docs/advanced/images-sha256.rst: the same digest for ghcr.io/mellanox
# k8s-rdma-shared-dev-plugin v1.5.3 in the tables of several releases, e.g. v25.4.0).
RDMA_SHARED_DEVICE_PLUGIN = (
    "ghcr.io/mellanox/k8s-rdma-shared-dev-plugin:v1.5.3"
    "@sha256:1eb5ab7f4b6f0cf89c954cf7ac8eb2e6fb2290a4f5f57417136a5302f20b12c8"
)
# DCGM: nv-hostengine and dcgmi (diagnostics); nvidia-smi comes from the driver via the runtime.
# No public source pins a digest for this tag: AWAITING_DIGEST.
DCGM = "nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04"
# Runs the small stdlib-only scripts in machine/addons (node taint, iptables exporter). Docker's
# official images are rebuilt under the same tag; this is the multi-platform index public pins agree on.
PYTHON = (
    "docker.io/library/python:3.12.11-slim-bookworm"
    "@sha256:519591d6871b7bc437060736b9f7456b8731f1499a57e22e6c285135ae657bf7"
)
# The Prometheus project's Docker Hub repositories (prom/*), where public pins of these releases' digests
# point; the quay.io copies' digests are pinned less widely, so they are not used.
PROMETHEUS = "docker.io/prom/prometheus:v3.5.0@sha256:63805ebb8d2b3920190daf1cb14a60871b16fd38bed42b857a3182bc621f4996"
# amtool is built at the same release (tests/tools/go/alertmanager/go.mod).
ALERTMANAGER = (
    "docker.io/prom/alertmanager:v0.28.1@sha256:27c475db5fb156cab31d5c18a4251ac7ed567746a2483ff264516437a39b15ba"
)
NODE_EXPORTER = (
    "docker.io/prom/node-exporter:v1.9.1@sha256:d00a542e409ee618a4edc67da14dd48c5da66726bbd5537ab2af9c1dfc442c8a"
)
# k8s-staging-kube-state-metrics; the digest public pins (and a running cluster's image_id) agree on.
KUBE_STATE_METRICS = (
    "registry.k8s.io/kube-state-metrics/kube-state-metrics:v2.15.0"
    "@sha256:db384bf43222b066c378e77027a675d4cd9911107adba46c2922b3a55e10d6fb"
)
GRAFANA = "docker.io/grafana/grafana:11.6.0@sha256:62d2b9d20a19714ebfe48d1bb405086081bc602aa053e28cf6d73c7537640dfb"
# dcgm-exporter tags are <DCGM version>-<exporter version>: the DCGM the health check runs (DCGM above).
# No public source pins a digest for this tag: AWAITING_DIGEST.
DCGM_EXPORTER = "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04"
# The balloon pods' only container does nothing; the pause image is preloaded on every node. Its
# digest is the one public manifests pin for registry.k8s.io/pause:3.10.
PAUSE = f"{versions.PAUSE_IMAGE}@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a"

# Images in this table that carry no digest yet, each for the reason given where it is defined.
AWAITING_DIGEST = (DCGM, DCGM_EXPORTER, CLUSTER_AUTOSCALER["1.34"])


def cluster_autoscaler(kubernetes_version: str) -> str:
    minor = ".".join(kubernetes_version.split(".")[:2])
    return CLUSTER_AUTOSCALER[minor]


def table() -> tuple[str, ...]:
    """Every image reference defined in this module (its constants, and the autoscaler's per minor)."""
    found: list[str] = []
    for name, value in globals().items():
        values = value.values() if isinstance(value, dict) else [value]
        if name.isupper():
            found += [v for v in values if isinstance(v, str) and parse_image(v) is not None]
    return tuple(dict.fromkeys(found))


def in_cluster_registry(reference: str, login_server: str) -> str:
    """The reference as pods pull it: the cluster registry's cached copy, same tag and digest."""
    ref = parse_image(reference)
    if ref is None:
        raise ValueError(f"{reference}: not a pinned image from a registry the cluster's cache serves")
    return ref.cached_in(login_server)
