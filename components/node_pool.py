"""One configured node pool: its scale sets ("shards"), each sized to Azure's per-scale-set limits.

Shards come from ``infra.sizing.shards`` (100 VMs per InfiniBand scale set with a single
placement group, 1,000 otherwise), are numbered and only ever appended, so growing a pool
adds scale sets and never touches existing ones. Each scale set:
- runs one cloud-init for the whole pool (rendered once; its fingerprint is a tag, so a
  preview shows a model change);
- gives every NIC ``1 + podIpsPerNode`` IP configurations in its shard's subnet (alias IPs
  for Azure CNI), and no public IP;
- leaves its capacity to the cluster-autoscaler (``ignore_changes`` on ``sku.capacity``;
  set only at creation, to the shard's ``minNodes``) and carries the autoscaler's tags;
- upgrades manually: a changed model never reimages a running GPU job (README "Rolling
  out a node change").
Resources grow with shards, never with nodes.
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_azure_native as azure

from components.machines import ADMIN_USERNAME, linux_ssh_only
from infra import naming
from infra.cloudinit import custom_data, fingerprint
from infra.cluster import ClusterSpec
from infra.config import NodePoolConfig
from infra.node.pool import OS_DISK_GB, ScaleSetShape, ephemeral_os_disk, image, scale_set_tags
from infra.sizing import Shard, shards


class NodePool(pulumi.ComponentResource):
    scale_sets: dict[str, azure.compute.VirtualMachineScaleSet]

    def __init__(self, name: str, *, cluster: ClusterSpec, pool: NodePoolConfig,
                 resource_group_name: pulumi.Input[str], subnet_ids: dict[str, pulumi.Input[str]],
                 identity_ids: Sequence[pulumi.Input[str]], opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("supercluster:nodes:NodePool", name, None, opts)
        cloud_init = cluster.node_cloud_inits[pool.name]  # rendered and size-checked by infra.cluster
        self.custom_data = custom_data(cloud_init, f"node pool {pool.name}")
        self.fingerprint = fingerprint(cloud_init)
        self.scale_sets = {}
        for shard in shards(pool):
            self.scale_sets[shard.name] = self._scale_set(
                name, cluster, pool, shard, resource_group_name, subnet_ids[shard.name], identity_ids)
        self.register_outputs({
            "scaleSetIds": {key: vmss.id for key, vmss in self.scale_sets.items()},
            "cloudInitFingerprint": self.fingerprint,
        })

    def _scale_set(self, name: str, cluster: ClusterSpec, pool: NodePoolConfig, shard: Shard,
                   resource_group_name: pulumi.Input[str], subnet_id: pulumi.Input[str],
                   identity_ids: Sequence[pulumi.Input[str]]) -> azure.compute.VirtualMachineScaleSet:
        config = cluster.config
        shape = ScaleSetShape.of(pool)
        subnet = azure.compute.ApiEntityReferenceArgs(id=subnet_id)
        # The primary IP is the node's; every other one is a pod's (Azure CNI azure-vnet-ipam).
        ip_configurations = [azure.compute.VirtualMachineScaleSetIPConfigurationArgs(
            name="node", primary=True, subnet=subnet, private_ip_address_version="IPv4")]
        ip_configurations += [
            azure.compute.VirtualMachineScaleSetIPConfigurationArgs(
                name=f"pod{i:03d}", primary=False, subnet=subnet, private_ip_address_version="IPv4")
            for i in range(1, pool.pod_ips_per_node + 1)
        ]
        if ephemeral_os_disk(pool):
            os_disk = azure.compute.VirtualMachineScaleSetOSDiskArgs(
                create_option="FromImage", caching="ReadOnly", disk_size_gb=OS_DISK_GB,
                diff_disk_settings=azure.compute.DiffDiskSettingsArgs(option="Local", placement="ResourceDisk"))
        else:
            os_disk = azure.compute.VirtualMachineScaleSetOSDiskArgs(
                create_option="FromImage", caching="ReadWrite", disk_size_gb=OS_DISK_GB,
                managed_disk=azure.compute.VirtualMachineScaleSetManagedDiskParametersArgs(
                    storage_account_type="Premium_LRS"))
        return azure.compute.VirtualMachineScaleSet(
            f"{name}-s{shard.index:03d}",
            vm_scale_set_name=naming.scale_set(config.cluster_name, shard.name),
            resource_group_name=resource_group_name,
            location=config.location,
            # Set once, at creation; from then on the cluster-autoscaler owns it (see ignore_changes).
            sku=azure.compute.SkuArgs(name=pool.vm_size, tier="Standard", capacity=shard.min_nodes),
            orchestration_mode="Uniform",
            single_placement_group=shape.single_placement_group,
            platform_fault_domain_count=shape.platform_fault_domain_count,
            # Overprovisioned extra VMs would boot, join the cluster and vanish again.
            overprovision=False,
            upgrade_policy=azure.compute.UpgradePolicyArgs(mode="Manual"),
            identity=azure.compute.VirtualMachineScaleSetIdentityArgs(
                type="UserAssigned", user_assigned_identities=list(identity_ids)),
            virtual_machine_profile=azure.compute.VirtualMachineScaleSetVMProfileArgs(
                os_profile=azure.compute.VirtualMachineScaleSetOSProfileArgs(
                    computer_name_prefix=shard.name,
                    admin_username=ADMIN_USERNAME,
                    custom_data=self.custom_data,
                    linux_configuration=linux_ssh_only(config.admin_ssh_public_key),
                ),
                storage_profile=azure.compute.VirtualMachineScaleSetStorageProfileArgs(
                    image_reference=azure.compute.ImageReferenceArgs(**image(pool)),
                    os_disk=os_disk,
                ),
                network_profile=azure.compute.VirtualMachineScaleSetNetworkProfileArgs(
                    network_interface_configurations=[azure.compute.VirtualMachineScaleSetNetworkConfigurationArgs(
                        name="nic", primary=True, enable_accelerated_networking=True,
                        ip_configurations=ip_configurations,
                    )],
                ),
                security_profile=azure.compute.SecurityProfileArgs(
                    encryption_at_host=pool.size.encryption_at_host),
                diagnostics_profile=azure.compute.DiagnosticsProfileArgs(
                    boot_diagnostics=azure.compute.BootDiagnosticsArgs(enabled=True)),
            ),
            tags=scale_set_tags(config, pool, shard, self.fingerprint),
            opts=pulumi.ResourceOptions(
                parent=self,
                # A scale set holds running jobs: deleting or replacing one needs a deliberate unprotect
                # (README "Removing a pool").
                protect=True,
                ignore_changes=["sku.capacity"],
            ),
        )
