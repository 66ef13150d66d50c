"""Nothing stateful is lost by a `pulumi up`: what is protected, and what each config key changes.

The sweep changes one config key at a time on dev (every component, ~1 s per run), diffs the
plan against dev's with ``plan.diff`` (which decides replacements offline and flags
stateful ones), and asserts exactly which resources the change may touch and that it replaces
or deletes nothing stateful, except where the key itself is about that resource (then the diff
flags it and protection stops `pulumi up`; docs/runbooks/ says what to do).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from plan.diff import diff_plans
from plan.runner import ProgramRun
from plan.stackfile import PROJECT_DIR
from tests.conftest import RETIRE_GPU, as_plan, deploy_after
from tests.helpers import raw_stack

# The second stage of scripts/test.sh (tens of seconds): every config key's change planned as a second deploy.
pytestmark = pytest.mark.slow

# --------------------------------------------------------------------------- what must be protected

# (type, name after "<cluster>-", why losing it loses data or breaks the cluster). Each row must match
# at least one resource of each stack, so renaming a resource cannot quietly empty a row.
MUST_PROTECT = [
    ("azure-native:resources:ResourceGroup", r".+", "holds everything; deleting it deletes the cluster"),
    (
        "azure-native:network:VirtualNetwork",
        r".+",
        "every machine's network; the cluster's subnets are inline in "
        "it (they hold NICs: re-created means every machine in them goes first)",
    ),
    ("azure-native:network:VirtualNetworkPeering", r".+", "pods reach pods across pool VNets through them"),
    ("azure-native:network:PublicIPPrefix", r".+-egress", "egress addresses other parties allow-list"),
    ("azure-native:keyvault:Vault", r".+", "every key and token the machines fetch at boot"),
    ("azure-native:storage:StorageAccount", r".+", "etcd snapshots"),
    ("azure-native:storage:BlobContainer", r"(events-)?etcd-backup-container", "etcd snapshots"),
    ("azure-native:containerregistry:Registry", r"registry-acr", "the image cache every node boots from"),
    ("azure-native:compute:VirtualMachineScaleSet", r"pool-\w+-s\d{3}", "running jobs"),
    ("azure-native:compute:VirtualMachine", r"(events-)?etcd-\d+-vm", "an etcd member's data on local NVMe"),
    (
        "azure-native:network:NetworkInterface",
        r"(events-)?etcd-\d+-nic",
        "an etcd member's address, in every peer's config",
    ),
    ("azure-native:network:LoadBalancer", r"control-plane-lb", "the API endpoint every node and kubeconfig names"),
    (
        "tls:index/privateKey:PrivateKey",
        r"control-plane-pki-(cluster-ca|front-proxy-ca)-key",
        "a new CA key re-issues every certificate and strands every node",
    ),
    (
        "tls:index/selfSignedCert:SelfSignedCert",
        r"control-plane-pki-(cluster-ca|front-proxy-ca)-cert",
        "every node and kubeconfig trusts it",
    ),
    (
        "tls:index/privateKey:PrivateKey",
        r"control-plane-pki-service-account-key",
        "a new key invalidates every service-account token",
    ),
    (
        "tls:index/privateKey:PrivateKey",
        r"etcd-pki-(events-etcd-|client-)?ca-key",
        "every etcd member's certificates, or the apiserver's etcd client certificate",
    ),
    ("tls:index/selfSignedCert:SelfSignedCert", r"etcd-pki-(events-etcd-|client-)?ca-cert", "etcd members trust it"),
    (
        "tls:index/privateKey:PrivateKey",
        r"monitoring-access-alertmanager-cluster-ca-key",
        "the Alertmanager mesh's CA: a new one splits the mesh until every replica restarts",
    ),
    (
        "tls:index/selfSignedCert:SelfSignedCert",
        r"monitoring-access-alertmanager-cluster-ca-cert",
        "every Alertmanager replica admits peers by it (read once, at start)",
    ),
    (
        "random:index/randomBytes:RandomBytes",
        r"control-plane-encryption-key",
        "every Secret in etcd is encrypted with it: a new key makes them unreadable",
    ),
]


def _short_name(run: ProgramRun, name: str) -> str:
    return name.removeprefix(f"{run.stack}-")  # both stacks name their cluster after the stack


@pytest.fixture(params=["dev", "prod"])
def stack_plan(request, dev_plan, prod_plan) -> ProgramRun:
    return {"dev": dev_plan, "prod": prod_plan}[request.param]


@pytest.mark.parametrize(
    "typ,pattern,why", MUST_PROTECT, ids=[f"{t.rsplit(':', 1)[-1]}:{p}" for t, p, _ in MUST_PROTECT]
)
def test_everything_whose_loss_loses_data_or_breaks_the_cluster_is_protected(stack_plan, typ, pattern, why):
    found = [r for r in stack_plan.of_type(typ) if re.fullmatch(pattern, _short_name(stack_plan, r.name))]
    assert found, f"no {typ} named {pattern} in {stack_plan.stack}: the table is stale"
    unprotected = [r.name for r in found if not r.options["protect"]]
    assert not unprotected, f"{unprotected} must be protected: {why}"


def test_backups_are_retained_even_when_deleted_on_purpose(stack_plan):
    containers = stack_plan.of_type("azure-native:storage:BlobContainer")
    assert containers and all(c.options["retainOnDelete"] for c in containers)


def test_what_others_own_is_ignored(stack_plan):
    """The autoscaler owns capacity (never ignored: Pulumi would send the stored creation value, docs/day2.md);
    stateful and rolled machines never take a cloud-init change from `pulumi up`; Azure refuses new SSH keys on
    an existing VM."""
    for vmss in stack_plan.of_type("azure-native:compute:VirtualMachineScaleSet"):
        assert "sku.capacity" not in vmss.options["ignoreChanges"], vmss.name
    for vm in stack_plan.of_type("azure-native:compute:VirtualMachine"):
        assert "osProfile.linuxConfiguration.ssh.publicKeys" in vm.options["ignoreChanges"], vm.name
        if re.fullmatch(r"(events-)?etcd-\d+-vm|control-plane-vm-\d+-vm", _short_name(stack_plan, vm.name)):
            assert "osProfile.customData" in vm.options["ignoreChanges"], vm.name


# --------------------------------------------------------------------------- the config-key sweep

NEW_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK6o7lda3/PA3tpeQIftUOcZiIoiK3/2tDOX8dmJZESx example-sweep-replace-me"
# An index equal to the list's length appends, as `pulumi config set --path` does.
# A new pool appended after dev's own, in the next free address slot.
_DEV_POOLS = raw_stack("dev")["nodePools"]
_NEW = len(_DEV_POOLS)
NEW_POOL = (
    f"nodePools[{_NEW}].name=cpu2",
    f"nodePools[{_NEW}].role=cpu",
    f"nodePools[{_NEW}].vmSize=Standard_D16ds_v5",
    f"nodePools[{_NEW}].minNodes=0",
    f"nodePools[{_NEW}].maxNodes=3",
    f"nodePools[{_NEW}].podIpsPerNode=16",
    f"nodePools[{_NEW}].addressSlot={max(pool['addressSlot'] for pool in _DEV_POOLS) + 1}",
)
NODES = r"pool-\w+-s\d{3}"
# The apiserver scale set's model: a change to it Azure rolls one instance at a time (infra/control_plane/scale_set.py).
APISERVERS = r"control-plane-apiservers"
VMS = rf"(etcd|events-etcd|nat-hosts)-\d+-vm|{APISERVERS}"
IMAGE_TEMPLATES = r"images-(cpu|gpu)-template"  # what the machine images carry (infra/assembly/machine_image.py)


@dataclass(frozen=True)
class Change:
    """One key's representative change and what it may touch (names after ``dev-``, regexes that must match whole)."""

    overrides: tuple[str, ...]
    touches: str  # every Azure, tls or random resource it creates, updates, replaces or deletes
    dangers: str = r"(?!)"  # the stateful resources it replaces or deletes (flagged; protection stops `pulumi up`)
    only_creates: bool = False
    also_updates: str = r"(?!)"  # updated in place even where only_creates holds


# etcd's metrics port, and the controller-manager's and scheduler's on the apiservers, open to the
# monitoring pools' subnets (infra/network/security_groups.py): a CPU pool's subnets changing, or a new CPU
# pool, updates both etcd NSGs' and the apiserver NSG's allow rule in place.
MONITORED_NSGS = r"((events-)?etcd|apiserver)-nsg"


SWEEP = {
    # Rendered into every machine: the apiserver model first (rolled by Azure), then node models (Manual
    # upgrade policy) and NAT hosts one per deploy; etcd ignores customData (its tags show it). The machine
    # image's templates carry the binaries of the version, so it comes with a new image version.
    "kubernetesVersion": Change(
        ("kubernetesVersion=1.33.5", 'machineImageVersion="1.1.0"'), rf"{NODES}|{VMS}|{IMAGE_TEMPLATES}"
    ),
    # A new machine image: its templates, and the scale sets' model (new instances boot it; running ones keep
    # theirs). Dedicated VMs ignore it (shown, not applied) until each is replaced on its own (docs/node-image.md).
    "machineImageVersion": Change(('machineImageVersion="1.1.0"',), rf"{NODES}|{VMS}|{IMAGE_TEMPLATES}"),
    # Azure refuses new keys on an existing VM: every VM ignores them, scale sets take them in their model.
    "adminSshPublicKey": Change((f"adminSshPublicKey={NEW_KEY}",), rf"{NODES}|{VMS}"),
    # New members join, one per deploy (infra/etcd/membership_change.py: 1 -> 2 is the step); the existing one only
    # shows a new cloud-init fingerprint.
    "etcd.members": Change(("etcd.members=2",), rf"etcd-\d+(-.+)?|{APISERVERS}"),
    "controlPlane.apiservers": Change(("controlPlane.apiservers=3",), r"control-plane-.+"),
    # The hub's own subnet moves with it (flagged); the NSG rules that name the hub follow.
    "network.hub.addressSpace": Change(
        ("network.hub.addressSpace=10.251.0.0/22",), r"hub-vnet|hub-researchers|[\w-]+-nsg", dangers=r"hub-researchers"
    ),
    "nodePools[].vmSize": Change(("nodePools[1].vmSize=Standard_D32ds_v5",), r"pool-cpu-s\d{3}"),
    # Subnets are sized for a full shard of pod IPs: more pod IPs per node cannot fit the live subnet (its
    # prefix, inline in the pool's VNet, is flagged).
    "nodePools[].podIpsPerNode": Change(
        ("nodePools[1].podIpsPerNode=32",), rf"pool-cpu-s\d{{3}}|cpu|{MONITORED_NSGS}", dangers=r"cpu"
    ),
    "nodePools[].retired": Change(RETIRE_GPU, r"pool-gpu-s\d{3}"),
    "nodePools (a new pool)": Change(
        NEW_POOL, rf".*cpu2.*|{MONITORED_NSGS}", only_creates=True, also_updates=MONITORED_NSGS
    ),
    # The apiservers' authentication config only: the scale set's model, rolled by Azure one instance at a time.
    "peopleSignIn": Change(
        (
            "peopleSignIn.tenantId=0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
            "peopleSignIn.clientId=8a7b6c5d-4e3f-4a1b-9c8d-7e6f5a4b3c2d",
        ),
        APISERVERS,
    ),
    "images.preload": Change(
        ("images.preload[0]=docker.io/library/busybox:1.36", 'machineImageVersion="1.1.0"'),
        rf"{NODES}|{VMS}|registry-cache-\w+|{IMAGE_TEMPLATES}",
    ),
}

# Keys the sweep does not run, each with where its behaviour is pinned down.
NOT_SWEPT = {
    "production": ("validation only: no resource reads it", "test_a_production_cluster_must_page_someone"),
    "network.serviceCidr": (
        "refused on a live cluster (docs/day2.md)",
        "test_changes_a_live_cluster_cannot_take_are_refused",
    ),
    "azure-native:location": ("every Azure resource moves region, i.e. is replaced", "test_replacement_table"),
    "clusterName": (
        "renames every resource",
        "test_renaming_the_cluster_flags_every_protected_resource_it_would_replace",
    ),
    "network.addressSpace": (
        "re-addresses every subnet (never change it; subnets are create-only)",
        "test_replacement_table",
    ),
    "network.hub.stack": (
        "another team's hub: only our peerings and route in it",
        "test_another_teams_hub_is_read_by_stack_reference_and_changed_only_through_its_subscription",
    ),
    "network.natHosts": (
        "NAT host VMs behind their load balancer, rolled one per deploy (docs/day2.md)",
        "test_a_patch_release_replaces_one_nat_host_per_deploy_never_all",
    ),
    "network.maxPrivateIps": (
        "validation limits only; no resource reads them",
        "test_over_the_peered_group_fails_with_the_numbers_and_what_would_fit_and_raising_the_limit_passes",
    ),
    "etcd.vmSize": (
        "a resize is declared a replacement, which protection stops",
        "test_members_are_protected_keep_their_cloud_init_and_spread_over_zones",
    ),
    "etcd.quotaBackendBytes": (
        "the member's files only; the VM ignores customData",
        "test_a_cloud_init_change_neither_replaces_nor_rewrites_a_member",
    ),
    "eventsEtcd": (
        "the same component as etcd",
        "test_members_are_protected_keep_their_cloud_init_and_spread_over_zones",
    ),
    "controlPlane.vmSize": (
        "the apiserver scale set's model: Azure resizes one instance at a time (docs/day2.md)",
        "test_a_control_plane_resize_is_one_model_change_that_azure_rolls",
    ),
    "nodePools[].name": (
        "a new name is a new pool, and the old one is removed: refused unless retired",
        "test_removing_a_pool_the_last_deploy_had_not_retired_exits_2_with_one_line",
    ),
    "nodePools[].minNodes": (
        "the scale set's min tag; capacity is the autoscaler's",
        "test_autoscaler_owned_capacity_is_never_sent_to_a_live_scale_set",
    ),
    "nodePools[].maxNodes": (
        "the max tag, and new shards appended",
        "test_growing_a_pool_names_exactly_the_resources_it_touches",
    ),
    "nodePools[].labels": (
        "the pool's scale sets' model and tags",
        "test_a_rendered_file_change_names_exactly_the_pool_and_its_files",
    ),
    "nodePools[].taints": ("as labels", "test_a_rendered_file_change_names_exactly_the_pool_and_its_files"),
    "nodePools[].role": (
        "role and size are validated together; as vmSize",
        "test_gpu_pool_needs_a_gpu_size_and_cpu_pool_a_cpu_size",
    ),
    "nodePools[].infiniband": ("as vmSize; the placement shape is create-only", "test_replacement_table"),
    "nodePools[].addressSlot": (
        "moves the pool's VNet (never change it; validation refuses a slot in use)",
        "test_duplicate_pool_names_and_slots_are_refused",
    ),
    "addons.": (
        "in-cluster objects only, none stateful",
        "test_turning_an_addon_off_removes_exactly_its_objects_from_the_plan",
    ),
}

IN_CLUSTER_OR_COMPONENT = ("kubernetes:", "pulumi:providers:kubernetes", "supercluster:")


@pytest.fixture(scope="module")
def dev_before(dev_plan):
    """dev as a later deploy sees it (no capacity sent to its scale sets any more, docs/day2.md)."""
    return as_plan(deploy_after(dev_plan))


@pytest.mark.parametrize("key", list(SWEEP))
def test_a_config_key_changes_only_its_own_resources_and_nothing_stateful(key, dev_plan, dev_before, retired_gpu_plan):
    change = SWEEP[key]
    after = retired_gpu_plan if change.overrides == RETIRE_GPU else deploy_after(dev_plan, *change.overrides)
    diff = diff_plans(dev_before, as_plan(after))
    touched = [c for c in diff.resources if not c.type.startswith(IN_CLUSTER_OR_COMPONENT)]
    assert touched, f"{key}: the change reached no resource"
    strays = [(c.action, c.name) for c in touched if not re.fullmatch(change.touches, c.name.removeprefix("dev-"))]
    assert not strays, f"{key} touches resources it has nothing to do with: {strays}"
    dangers = [
        (c.name, c.danger) for c in diff.dangers if not re.fullmatch(change.dangers, c.name.removeprefix("dev-"))
    ]
    assert not dangers, f"{key} replaces or deletes stateful resources: {dangers}"
    if change.dangers != Change.dangers:
        assert diff.dangers, f"{key}: the stateful change it must cause is no longer flagged"
    if change.only_creates:  # in Azure; in the cluster, e.g. the autoscaler's --max-nodes-total grows with a pool
        created = [
            c
            for c in touched
            if not (c.action == "update" and re.fullmatch(change.also_updates, c.name.removeprefix("dev-")))
        ]
        assert {c.action for c in created} == {"create"}, [(c.action, c.name) for c in touched]


def _readme_config_keys() -> list[str]:
    section = (PROJECT_DIR / "docs" / "config-reference.md").read_text().split("## Rules across keys", 1)[0]
    return re.findall(r"^\| `([^`]+)`", section, flags=re.MULTILINE)


def test_every_config_key_is_swept_or_pinned_down_elsewhere():
    covered = list(SWEEP) + list(NOT_SWEPT)
    for key in _readme_config_keys():
        key = key.removesuffix(".*")
        assert any(key == c or key.startswith(c) or c.startswith(key) for c in covered), (
            f"{key}: neither swept nor listed in NOT_SWEPT"
        )
    tests = "\n".join(path.read_text() for path in Path(__file__).parents[1].rglob("test_*.py"))
    for key, (_, test) in NOT_SWEPT.items():
        assert f"def {test}(" in tests, f"{key}: no test named {test}"
