"""Node pools and the image registry as the real program declares them (prod and dev plans, under mocks)."""

from __future__ import annotations

from collections import Counter

import pytest

from infra.facts.labels import INFINIBAND_DOMAIN_LABEL
from plan.artifacts import custom_data_of
from tests.conftest import deploy_after, plan_stack
from tests.helpers import cluster_subnets

VMSS = "azure-native:compute:VirtualMachineScaleSet"
ROLE_ASSIGNMENT = "azure-native:authorization:RoleAssignment"


def scale_sets(run, pool: str):
    return [r for r in run.of_type(VMSS) if r.name.startswith(f"{run.stack}-pool-{pool}-s")]


def test_prod_policy_the_shards_azures_limits_imply(prod_plan):
    """A prod-policy test: it reads Pulumi.prod.yaml's pool sizes (through the prod plan) and names them."""
    h100 = scale_sets(prod_plan, "h100a") + scale_sets(prod_plan, "h100b")
    assert len(h100) == 60  # 6,000 InfiniBand nodes at 100 per single-placement-group scale set
    for vmss in h100:
        assert vmss.inputs["singlePlacementGroup"] is True
        assert vmss.inputs["platformFaultDomainCount"] == 1
        assert vmss.inputs["overprovision"] is False
    cpu = scale_sets(prod_plan, "cpu")
    assert len(cpu) == 2  # 1,500 nodes at 1,000 per large scale set
    assert all(v.inputs["singlePlacementGroup"] is False and v.inputs["overprovision"] is False for v in cpu)
    assert [v.inputs["vmScaleSetName"] for v in cpu] == ["prod-cpu-s000", "prod-cpu-s001"]
    # minNodes 50 and maxNodes 1,480: the first shard holds the minimum, the rest of the range follows.
    assert [(v.inputs["tags"]["min"], v.inputs["tags"]["max"]) for v in cpu] == [("50", "1000"), ("0", "480")]


def test_every_nic_has_one_ip_per_pod_plus_its_own_in_the_shard_subnet(prod_plan):
    pod_ips = {"h100a": 10, "h100b": 10, "cpu": 16}
    for pool, count in pod_ips.items():
        for vmss in scale_sets(prod_plan, pool):
            nics = vmss.inputs["virtualMachineProfile"]["networkProfile"]["networkInterfaceConfigurations"]
            assert len(nics) == 1
            ip_configs = nics[0]["ipConfigurations"]
            assert len(ip_configs) == 1 + count
            assert [c.get("primary", False) for c in ip_configs] == [True] + [False] * count
            shard = vmss.name.rsplit("-", 1)[1]
            vnet, _ = cluster_subnets(prod_plan)[f"{pool}-{shard}"]
            assert vnet.urn in vmss.dependencies, "the VNet that creates the shard's subnet"
            assert {c["subnet"]["id"] for c in ip_configs} == {f"{vnet.id}/subnets/{pool}-{shard}"}
            assert not any("publicIPAddressConfiguration" in c for c in ip_configs)


def test_every_scale_set_leaves_capacity_to_the_autoscaler(prod_plan):
    for vmss in prod_plan.node_scale_sets():
        assert "sku.capacity" not in vmss.options["ignoreChanges"]  # Pulumi would send the stored value
        assert vmss.options["protect"] is True
        assert vmss.inputs["upgradePolicy"] == {"mode": "Manual"}
        assert vmss.inputs["orchestrationMode"] == "Uniform"
        tags = vmss.inputs["tags"]
        assert vmss.inputs["sku"]["capacity"] == int(tags["min"])
        assert tags["cluster-autoscaler-enabled"] == "true" and tags["cluster-autoscaler-name"] == "prod"


def test_vm_model(prod_plan):
    gpu, cpu = scale_sets(prod_plan, "h100a")[0], scale_sets(prod_plan, "cpu")[0]
    gpu_profile, cpu_profile = gpu.inputs["virtualMachineProfile"], cpu.inputs["virtualMachineProfile"]
    # The exact machine image version of each kind (components/machine_images.py), never a marketplace "latest".
    assert gpu_profile["storageProfile"]["imageReference"]["id"].endswith("/galleryImages/prod-gpu/versions/1.0.0")
    assert cpu_profile["storageProfile"]["imageReference"]["id"].endswith("/galleryImages/prod-cpu/versions/1.0.0")
    assert gpu_profile["storageProfile"]["osDisk"]["diffDiskSettings"] == {
        "option": "Local",
        "placement": "ResourceDisk",
    }
    assert "diffDiskSettings" not in cpu_profile["storageProfile"]["osDisk"]
    assert gpu_profile["securityProfile"]["encryptionAtHost"] is True
    assert gpu.inputs["identity"]["type"] == "UserAssigned"
    assert gpu.inputs["identity"]["userAssignedIdentities"][0].endswith("/prod-id-node")
    assert gpu_profile["osProfile"]["linuxConfiguration"]["disablePasswordAuthentication"] is True


def test_one_cloud_init_per_shard_with_its_fingerprint_tagged(prod_plan):
    """A CPU pool's shards share one model; an InfiniBand pool's differ exactly in the InfiniBand domain
    their nodes register (the shard), so each has its own text and fingerprint."""
    cpu = scale_sets(prod_plan, "cpu")
    assert len({custom_data_of(v) for v in cpu}) == 1
    assert len({v.inputs["tags"]["supercluster.io_cloud-init"] for v in cpu}) == 1
    gpu = scale_sets(prod_plan, "h100a")
    texts = [custom_data_of(v) for v in gpu]
    assert len(set(texts)) == len(gpu) > 1
    assert len({v.inputs["tags"]["supercluster.io_cloud-init"] for v in gpu}) == len(gpu)
    first_domain = f"{INFINIBAND_DOMAIN_LABEL}=h100a-s000"
    for index, text in enumerate(texts):
        assert text.replace(f"{INFINIBAND_DOMAIN_LABEL}=h100a-s{index:03d}", first_domain) == texts[0]
    assert custom_data_of(scale_sets(prod_plan, "h100a")[0]) != custom_data_of(scale_sets(prod_plan, "cpu")[0])


@pytest.mark.slow  # a sequence of whole-program runs (seconds)
def test_resources_grow_with_shards_never_with_nodes():
    def counts(*overrides):
        # Prometheus node shards do grow with maxNodes, one per seriesPerShard (tests/infra/
        # test_addons_monitoring.py); pinned here so only the scale sets are compared.
        return Counter(r.type for r in plan_stack("dev", "addons.monitoring.nodeShards=2", *overrides).registrations)

    small, bigger = counts(), counts("nodePools[0].maxNodes=100", "nodePools[1].maxNodes=1000")
    assert small == bigger  # still one scale set per pool
    grown = counts("nodePools[0].maxNodes=101")  # one more InfiniBand shard
    assert grown[VMSS] == small[VMSS] + 1
    # Its scale set (its subnet is inline in the VNet) and the autoscaler's two grants: on that scale set
    # and the join on its subnet.
    assert grown[ROLE_ASSIGNMENT] == small[ROLE_ASSIGNMENT] + 2
    assert sum(grown.values()) == sum(small.values()) + 3


@pytest.mark.slow  # a sequence of whole-program runs (seconds)
def test_capacity_is_sent_only_to_a_scale_set_the_last_deploy_did_not_have(dev_plan):
    """The first deploy creates each shard at minNodes; the next one sends no capacity to those (Azure keeps the
    live count the autoscaler set) and the initial one only to the shard it adds."""
    assert all("capacity" in v.inputs["sku"] for v in dev_plan.node_scale_sets())
    grown = deploy_after(dev_plan, "nodePools[0].maxNodes=101", "nodePools[1].labels.team=vision")
    sent = {v.name: v.inputs["sku"].get("capacity") for v in grown.node_scale_sets()}
    assert sent == {
        "dev-pool-gpu-s000": None,
        "dev-pool-gpu-s001": 0,
        "dev-pool-cpu-s000": None,
        "dev-pool-platform-s000": None,
    }


@pytest.mark.slow  # a sequence of whole-program runs (seconds)
def test_growing_a_pool_appends_shards_and_keeps_the_existing_ones():
    before = plan_stack("dev", "nodePools[0].maxNodes=100")
    after = plan_stack("dev", "nodePools[0].maxNodes=250")
    names = [v.name for v in scale_sets(before, "gpu")]
    grown = [v.name for v in scale_sets(after, "gpu")]
    assert grown[: len(names)] == names and len(grown) == 3
    first_before, first_after = scale_sets(before, "gpu")[0], scale_sets(after, "gpu")[0]
    assert first_before.inputs == first_after.inputs


def test_registry_is_a_private_cache_nodes_may_pull_from(prod_plan):
    registry = prod_plan.of_type("azure-native:containerregistry:Registry")[0]
    assert registry.inputs["sku"] == {"name": "Premium"}
    assert registry.inputs["publicNetworkAccess"] == "Disabled"
    assert registry.inputs["anonymousPullEnabled"] is False and registry.inputs["adminUserEnabled"] is False
    assert registry.options["protect"] is True
    rules = prod_plan.of_type("azure-native:containerregistry:CacheRule")
    # One rule per upstream the preload list and the add-on images come from (infra/addons/images.py).
    assert [(r.inputs["sourceRepository"], r.inputs["targetRepository"]) for r in rules] == [
        ("docker.io/*", "docker/*"),
        ("ghcr.io/*", "ghcr/*"),
        ("registry.k8s.io/*", "k8s/*"),
        ("nvcr.io/*", "nvcr/*"),
    ]
    endpoint = prod_plan.named("prod-registry-endpoint")
    assert endpoint.inputs["privateLinkServiceConnections"][0]["groupIds"] == ["registry"]
    pull = prod_plan.named("prod-registry-node-pull")
    assert pull.inputs["roleDefinitionId"].endswith("/7f951dda-4ed3-4680-a7ca-43fe172d538d")
    assert prod_plan.outputs["registryLoginServer"] == f"{registry.inputs['registryName']}.azurecr.io"
    cloud_init = custom_data_of(scale_sets(prod_plan, "cpu")[0])
    assert f"{registry.inputs['registryName']}.azurecr.io/k8s/pause:3.10" in cloud_init
