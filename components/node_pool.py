"""One configured node pool: its scale sets ("shards"), each sized to Azure's per-scale-set limits.

Shards come from ``infra.config.sizing.shards`` (100 VMs per InfiniBand scale set with a single
placement group, 1,000 otherwise), are numbered and only ever appended, so growing a pool
adds scale sets and never touches existing ones. Each scale set:
- runs its shard's cloud-init (rendered by the assembly, infra/assembly/desired_cluster.py; shards differ only in their
  nodes' InfiniBand domain label; its fingerprint is a tag, so a preview shows a model change);
- gives every NIC ``1 + podIpsPerNode`` IP configurations in its shard's subnet (alias IPs
  for Azure CNI), and no public IP;
- leaves its capacity to the cluster-autoscaler: ``sku.capacity`` (the shard's ``minNodes``) is sent
  only when the scale set is created, i.e. when the last deploy's outputs do not list its shard.
  Never ``ignoreChanges``: Pulumi would send the capacity stored at creation with every later
  model update, scaling the live pool back to it (docs/day2.md, "Scale-set capacity");
- upgrades manually: a changed model never reimages a running GPU job (docs/runbooks/
  roll-out-a-node-change.md).
Resources grow with shards, never with nodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pulumi

from components import declare
from components.machines import ADMIN_USERNAME, linux_ssh_only
from infra.assembly.desired_cluster import ScaleSetShard
from infra.config import naming
from infra.config.cluster_config import ClusterConfig, NodePoolConfig
from infra.network.addressing import pod_ip_configurations
from infra.node.pool import OS_DISK_GB, ScaleSetShape, ephemeral_os_disk


class NodePool(pulumi.ComponentResource):
    scale_sets: dict[str, declare.Declared]

    def __init__(
        self,
        name: str,
        *,
        config: ClusterConfig,
        pool: NodePoolConfig,
        shards: Sequence[ScaleSetShard],
        resource_group_name: pulumi.Input[str],
        subnet_ids: Mapping[str, pulumi.Input[str]],
        identity_ids: Sequence[pulumi.Input[str]],
        image_id: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """``shards``: the pool's scale sets as the assembly decided them (``Cluster.shards_of(pool)``)."""
        super().__init__("supercluster:nodes:NodePool", name, None, opts)
        self.image_id = image_id
        self.scale_sets = {}
        self.fingerprints = {}
        for shard in shards:
            self.fingerprints[shard.shard.name] = shard.fingerprint
            self.scale_sets[shard.shard.name] = self._scale_set(
                name, config, pool, shard, resource_group_name, subnet_ids[shard.shard.name], identity_ids
            )
        self.register_outputs(
            {
                "scaleSetIds": {key: vmss.id for key, vmss in self.scale_sets.items()},
                "cloudInitFingerprints": self.fingerprints,
            }
        )

    def _scale_set(
        self,
        name: str,
        config: ClusterConfig,
        pool: NodePoolConfig,
        scale_set: ScaleSetShard,
        resource_group_name: pulumi.Input[str],
        subnet_id: pulumi.Input[str],
        identity_ids: Sequence[pulumi.Input[str]],
    ) -> declare.Declared:
        shard = scale_set.shard
        shape = ScaleSetShape.of(pool)
        # The primary IP is the node's; every other one is a pod's (Azure CNI azure-vnet-ipam). Built once
        # the subnet id is known: one Output per scale set, not one per IP configuration (and the subnet's own
        # Output applied, not first lifted again by Output.from_input).
        subnet = subnet_id if isinstance(subnet_id, pulumi.Output) else pulumi.Output.from_input(subnet_id)
        ip_configurations = subnet.apply(lambda subnet: _ip_configurations(subnet, pod_ip_configurations(pool)))
        if ephemeral_os_disk(pool):
            os_disk = {
                "createOption": "FromImage",
                "caching": "ReadOnly",
                "diskSizeGB": OS_DISK_GB,
                "diffDiskSettings": {"option": "Local", "placement": "ResourceDisk"},
            }
        else:
            os_disk = {
                "createOption": "FromImage",
                "caching": "ReadWrite",
                "diskSizeGB": OS_DISK_GB,
                "managedDisk": {"storageAccountType": "Premium_LRS"},
            }
        return declare.azure(
            "compute:VirtualMachineScaleSet",
            f"{name}-s{shard.index:03d}",
            {
                "vmScaleSetName": naming.scale_set(config.cluster_name, shard.name),
                "resourceGroupName": resource_group_name,
                "location": config.location,
                # Sent only at creation; afterwards Azure keeps the live capacity, which the autoscaler owns.
                "sku": {
                    "name": pool.vm_size,
                    "tier": "Standard",
                    **({} if scale_set.capacity is None else {"capacity": scale_set.capacity}),
                },
                "orchestrationMode": "Uniform",
                "singlePlacementGroup": shape.single_placement_group,
                "platformFaultDomainCount": shape.platform_fault_domain_count,
                # Overprovisioned extra VMs would boot, join the cluster and vanish again.
                "overprovision": False,
                "upgradePolicy": {"mode": "Manual"},
                "identity": {"type": "UserAssigned", "userAssignedIdentities": list(identity_ids)},
                "virtualMachineProfile": {
                    "osProfile": {
                        "computerNamePrefix": naming.computer_name_prefix(shard.name),
                        "adminUsername": ADMIN_USERNAME,
                        "customData": scale_set.custom_data,
                        "linuxConfiguration": linux_ssh_only(config.admin_ssh_public_key),
                    },
                    # The exact machine image version (components/machine_images.py). With upgrade policy Manual a
                    # new version reaches new instances only; running ones keep theirs until rolled.
                    "storageProfile": {"imageReference": {"id": self.image_id}, "osDisk": os_disk},
                    "networkProfile": {
                        "networkInterfaceConfigurations": [
                            {
                                "name": "nic",
                                "primary": True,
                                "enableAcceleratedNetworking": True,
                                "ipConfigurations": ip_configurations,
                            }
                        ]
                    },
                    "securityProfile": {"encryptionAtHost": pool.size.encryption_at_host},
                    "diagnosticsProfile": {"bootDiagnostics": {"enabled": True}},
                },
                "tags": dict(scale_set.tags),
            },
            pulumi.ResourceOptions(
                parent=self,
                # A scale set holds running jobs: deleting or replacing one needs a deliberate unprotect
                # (docs/runbooks/remove-a-pool.md).
                protect=True,
            ),
        )


def _ip_configurations(subnet_id: str, pod_ips: int) -> list[dict]:
    """IPv4 (Azure's default privateIPAddressVersion), all in the shard's subnet; only the node's is primary."""
    subnet = {"id": subnet_id}
    return [
        {"name": "node", "primary": True, "subnet": subnet},
        *({"name": f"pod{i:03d}", "subnet": subnet} for i in range(1, pod_ips + 1)),
    ]
