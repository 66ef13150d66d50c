"""Machines boot without the internet: no rendered cloud-init or unit of any machine of dev or prod names a
place outside the cluster's own registry, storage, Key Vault and Azure's host endpoints.

Walks the cloud-init every VM and scale set actually receives (decoded from the plan's customData),
every file and unit in it (compressed ones decompressed), and fails on any URL, host name or image registry
that is not one of:
- the cluster's Azure Container Registry (and its regional data endpoint), Key Vault and storage account;
- Azure's metadata service 169.254.169.254 and host address 168.63.129.16;
- an address inside the cluster's own networks (the apiserver load balancer, etcd members) or loopback;
- in-cluster service names (``kubernetes.default.svc``, ``*.cluster.local``);
- Kubernetes naming domains (API groups such as ``kubelet.config.k8s.io``, label and resource prefixes such
  as ``topology.kubernetes.io/zone`` or ``nvidia.com/gpu``): names, not servers. A known download or
  registry server under those domains (``registry.k8s.io``, ``dl.k8s.io``) is never exempt this way;
- URLs with no host (``unix:///run/containerd/containerd.sock``, the cloud provider's ``azure:///`` IDs) and
  hosts a script fills in at run time from its own manifest (``https://{registry}/...``, the registry
  this test checks in that manifest);
- Entra ID token audiences, which a machine names when it asks IMDS for a token and never connects to;
- the names of the images every node holds before kubelet starts (the pause image and ``images.preload``),
  which come from the machine image's archives (infra/node/pinned_images.py) and are never pulled by that name.
It also fails on any instruction that makes cloud-init fetch packages (``packages``, ``apt``, ``snap``).

One named set is allowed in the apiservers' files only: the attested join's run-time endpoints
(``attestation.RUN_TIME_HOSTS``: Azure Resource Manager and Microsoft's certificate hosts) and the name of Azure's
attested-data signer. The node certificates' approver reaches them when a node asks to join, never at boot, and no
node, NAT host or etcd member names them (``test_only_the_apiservers_name_the_attested_joins_run_time_endpoints``).
"""

from __future__ import annotations

import ipaddress
import json
import re

import pytest

from infra.catalog.image_refs import CACHE_PREFIXES
from infra.config import naming
from infra.day2.deploy_rules import APISERVER_ROLE, MACHINE_ROLE_TAG
from infra.etcd.backup import storage_account_name
from infra.facts import attestation
from infra.node import pinned_images as node_images
from infra.node.pool import preload_images
from plan.artifacts import VM_TYPES, cloud_init_files, custom_data_of
from tests.helpers import load_yaml, parsed

# The second stage of scripts/test.sh (tens of seconds): every rendered machine walked, and a boot in a
# network namespace.
pytestmark = pytest.mark.slow

AZURE_HOST_ADDRESSES = {"169.254.169.254", "168.63.129.16"}
# Audiences (Entra ID "resource" values) a machine asks IMDS for; identifiers, not servers it contacts.
TOKEN_AUDIENCES = {"https://vault.azure.net", "https://containerregistry.azure.net", "https://storage.azure.com/"}
IN_CLUSTER = re.compile(r"(kubernetes\.default\.svc|[\w.-]+\.cluster\.local)")
# Kubernetes and device-plugin naming domains: API groups, label, taint and resource-name prefixes.
NAMING_DOMAINS = ("k8s.io", "kubernetes.io", "kubernetes.azure.com", "nvidia.com", "supercluster.io")
# Servers under those domains that are real download or registry endpoints: never a name.
SERVERS = {*CACHE_PREFIXES, "dl.k8s.io", "pkgs.k8s.io", "cdn.dl.k8s.io", "packages.cloud.google.com"}
# Reached at run time by the apiservers' node certificates' approver only (infra/control_plane/csr_approval.py).
ATTESTED_JOIN_RUN_TIME = frozenset({*attestation.RUN_TIME_HOSTS, attestation.ATTESTATION_SIGNER})
FETCHING_KEYS = ("packages", "package_update", "package_upgrade", "apt", "snap", "yum_repos")

# A backslash ends a URL too: a JSON string's escaped newline follows one in a kubeconfig written into settings.
URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s\"'<>`)\]},;\\]+")
# A host name standing on its own (not a file path or a file name): a registry in an image reference, a
# server in a flag. Only public suffixes count, so unit and file names (kubelet.service) never match.
HOST = re.compile(
    r"(?<![\w./@-])((?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+"
    r"(?:com|net|org|io|dev|ai|co|cloud|app|gov|edu|us|xyz|azure|windows))(?![\w-])"
)


def allowed_hosts(stack: str) -> set[str]:
    config = parsed(stack)
    acr = naming.container_registry(config.cluster_name)
    return {
        f"{acr}.azurecr.io",
        f"{acr}.{config.location}.data.azurecr.io",
        f"{naming.key_vault(config.cluster_name)}.vault.azure.net",
        f"{storage_account_name(config.cluster_name)}.blob.core.windows.net",
    }


def preloaded_names(stack: str) -> set[str]:
    """The registry host of every image a node holds from its machine image (the pause image, images.preload)."""
    return {reference.split("/", 1)[0] for reference in preload_images(parsed(stack))}


def cluster_networks(run) -> list[ipaddress.IPv4Network]:
    networks = [ipaddress.ip_network("127.0.0.0/8")]
    for vnet in run.of_type("azure-native:network:VirtualNetwork"):
        networks += [ipaddress.ip_network(prefix) for prefix in vnet.inputs["addressSpace"]["addressPrefixes"]]
    return networks


def is_name(host: str) -> bool:
    """An API group or label prefix (not a server): under a naming domain and not a known server."""
    return host not in SERVERS and any(host == d or host.endswith(f".{d}") for d in NAMING_DOMAINS)


def _host_of(url: str) -> str:
    return re.sub(r":\d+$", "", url.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0].rsplit("@", 1)[-1])


def outside_places(text: str, stack: str, networks, run_time: frozenset[str] = frozenset()) -> set[str]:
    """Every URL or host name in ``text`` that is not the cluster's own or Azure's host endpoints (or one of
    ``run_time``, the hosts a machine's program reaches after boot, allowed where the caller says)."""
    hosts, found = allowed_hosts(stack) | run_time, set()
    for url in URL.findall(text):
        if url.rstrip(".") in TOKEN_AUDIENCES:
            continue
        host = _host_of(url)
        if not host or host.startswith("{"):
            continue
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            if host not in hosts and not IN_CLUSTER.fullmatch(host):
                found.add(url)
            continue
        if str(address) not in AZURE_HOST_ADDRESSES and not any(address in net for net in networks):
            found.add(url)
    stripped = URL.sub(" ", text)
    for host in HOST.findall(stripped):
        if (
            host not in hosts
            and host not in preloaded_names(stack)
            and not IN_CLUSTER.fullmatch(host)
            and not is_name(host)
        ):
            found.add(host)
    return found


def machines(run):
    return [r for r in run.registrations if r.type in VM_TYPES]


def everything_written(machine) -> str:
    """Its cloud-init and every file it writes, decoded: some are written gzip-compressed, which hides their text
    from a scan of the cloud-init alone."""
    return "\n".join([custom_data_of(machine) or "", *cloud_init_files(machine).values()])


def is_apiserver(machine) -> bool:
    return (machine.inputs.get("tags") or {}).get(MACHINE_ROLE_TAG) == APISERVER_ROLE


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_no_machine_boot_reaches_outside_the_cluster(stack, request):
    run = request.getfixturevalue(f"{stack}_plan")
    networks = cluster_networks(run)
    found = {}
    for machine in machines(run):
        text = custom_data_of(machine)
        assert text and text.startswith("#cloud-config"), machine.name
        document = load_yaml(text)
        fetching = [key for key in FETCHING_KEYS if key in document]
        run_time = ATTESTED_JOIN_RUN_TIME if is_apiserver(machine) else frozenset()
        places = outside_places(everything_written(machine), stack, networks, run_time)
        if fetching or places:
            found[machine.name] = sorted(places) + [f"cloud-init `{key}`" for key in fetching]
    assert len(machines(run)) >= 6  # nodes of every pool, NAT hosts, etcd, events etcd, apiservers
    assert not found, f"machines that would reach outside the cluster at boot: {found}"


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_only_the_apiservers_name_the_attested_joins_run_time_endpoints(stack, request):
    """The approver's endpoints are in the apiservers' files and in no node's, NAT host's or etcd member's."""
    run = request.getfixturevalue(f"{stack}_plan")
    named = {m.name: {h for h in ATTESTED_JOIN_RUN_TIME if h in everything_written(m)} for m in machines(run)}
    apiservers = [m.name for m in machines(run) if is_apiserver(m)]
    assert apiservers and all(named.pop(name) == ATTESTED_JOIN_RUN_TIME for name in apiservers)
    assert not {name: hosts for name, hosts in named.items() if hosts}, "named outside the apiservers"


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_preloaded_image_names_are_served_from_the_machine_image(stack, request):
    """The one exemption above holds only because each such image comes from an archive in the image."""
    run = request.getfixturevalue(f"{stack}_plan")
    config = parsed(stack)
    for machine in machines(run):
        files = cloud_init_files(machine)
        if node_images.MANIFEST_PATH not in files:
            continue  # etcd members and apiservers run no containers
        entries = json.loads(files[node_images.MANIFEST_PATH])["images"]
        assert {e["source"] for e in entries} <= set(preload_images(config))
        assert all(e["archive"] == node_images.archive_path(e["source"]) for e in entries), machine.name


def test_the_check_finds_what_it_must():
    """A download, a public registry and a stray address are found; the cluster's own places are not."""
    networks = [ipaddress.ip_network("10.0.0.0/8")]
    acr = naming.container_registry("dev")
    text = "\n".join(
        [
            "curl -fsSL https://dl.k8s.io/v1.33.4/bin/linux/amd64/kubelet",
            "image: nvcr.io/nvidia/k8s-device-plugin:v0.17.1",
            "endpoint=https://8.8.8.8:443",
            f"pull https://{acr}.azurecr.io/v2/ and https://10.1.2.3:6443 and http://169.254.169.254/metadata",
            "token for https://vault.azure.net from kubernetes.default.svc",
            "ExecStart=/usr/local/bin/kubelet --config=/etc/kubernetes/kubelet.yaml install.sh",
            "apiVersion: kubelet.config.k8s.io/v1beta1 labels supercluster.io/pool=gpu nvidia.com/gpu",
            "skopeo copy docker://registry.k8s.io/scheduler-plugins/kube-scheduler quay.io/prometheus",
        ]
    )
    # registry.k8s.io is dev's preloaded pause image's registry (the one host name exemption), so only:
    assert outside_places(text, "dev", networks) == {
        "https://dl.k8s.io/v1.33.4/bin/linux/amd64/kubelet",
        "nvcr.io",
        "https://8.8.8.8:443",
        "docker://registry.k8s.io/scheduler-plugins/kube-scheduler",
        "quay.io",
    }
