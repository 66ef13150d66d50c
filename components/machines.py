"""A dedicated VM with a static private IP: the shape shared by etcd members, apiservers and NAT hosts.

No public IP, ever; SSH only through the hub (NSGs in components/network.py); the
VM's only identity is its role's user-assigned identity, which is what lets its
boot script read its own Key Vault secrets and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi

from components import declare
from infra.catalog.vm_sizes import VM_SIZES
from infra.day2.deploy_rules import CUSTOM_DATA_PATH, Lifecycle
from infra.facts.tags import CLOUD_INIT as CLOUD_INIT_TAG

ADMIN_USERNAME = "azureuser"
SSH_KEYS_PATH = "osProfile.linuxConfiguration.ssh.publicKeys"
# Azure refuses to change a VM's image in place; a new machine image version is rolled by replacing
# one machine per deploy (infra/day2/deploy_rules.py ``stage``; etcd by its runbook), never by every VM of a role at
# once.
IMAGE_PATH = "storageProfile.imageReference"


@dataclass
class VmArgs:
    resource_group_name: pulumi.Input[str]
    location: str
    vm_name: str  # Azure name and hostname
    vm_size: str
    subnet_id: pulumi.Input[str]
    private_ip: str
    identity_id: pulumi.Input[str]
    custom_data: str  # base64 cloud-init; rendered by infra/, never secret
    custom_data_fingerprint: str
    admin_ssh_public_key: str
    # The exact machine image version it boots (components/machine_images.py). Kept for the VM's life:
    # a new version reaches it only when it is replaced, one machine per deploy (docs/node-image.md).
    image_id: pulumi.Input[str]
    zone: str | None = None
    os_disk_gb: int = 64
    enable_ip_forwarding: bool = False
    backend_pool_ids: list[pulumi.Input[str]] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)
    # How it meets a new cloud-init, image or size (infra/day2/deploy_rules.py, decided by the assembly):
    # - RUNBOOK (etcd) ignores its cloud-init and image; a resize restarts the VM on a host whose local NVMe is
    #   blank and `pulumi up` would resize every member at once, which loses quorum, so a size change is
    #   declared a replacement: protection stops it, the plan diff flags it, the runbook resizes one at a time;
    # - HELD and ROLLED (apiservers, NAT hosts) are replaced one VM per deploy: the old VM is deleted first (its
    #   name and static IP are fixed) and its NIC detached, not deleted, so the IP and load-balancer membership
    #   carry over; a ROLLED VM is replaced on its new cloud-init or image (Azure refuses a customData change on
    #   an existing VM: 409 PropertyChangeNotAllowed; and an image change in place), a HELD one ignores both.
    lifecycle: Lifecycle = Lifecycle.RUNBOOK


def linux_ssh_only(admin_ssh_public_key: str) -> dict:
    """The break-glass admin user: SSH key only, never a password (VMs and scale sets alike)."""
    return {
        "disablePasswordAuthentication": True,
        "ssh": {
            "publicKeys": [{"path": f"/home/{ADMIN_USERNAME}/.ssh/authorized_keys", "keyData": admin_ssh_public_key}]
        },
    }


class DedicatedVm(pulumi.ComponentResource):
    nic: declare.Declared
    vm: declare.Declared
    private_ip: str

    def __init__(self, name: str, args: VmArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("supercluster:machines:DedicatedVm", name, None, opts)
        self.private_ip = args.private_ip
        runbook, rolled = args.lifecycle is Lifecycle.RUNBOOK, args.lifecycle is Lifecycle.ROLLED
        self.nic = declare.azure(
            "network:NetworkInterface",
            f"{name}-nic",
            {
                "networkInterfaceName": f"{args.vm_name}-nic",
                "resourceGroupName": args.resource_group_name,
                "location": args.location,
                "enableAcceleratedNetworking": True,
                "enableIPForwarding": args.enable_ip_forwarding,
                "ipConfigurations": [
                    {
                        "name": "primary",
                        "primary": True,
                        "privateIPAllocationMethod": "Static",
                        "privateIPAddress": args.private_ip,
                        "subnet": {"id": args.subnet_id},
                        "loadBalancerBackendAddressPools": [{"id": pool_id} for pool_id in args.backend_pool_ids]
                        or None,
                    }
                ],
                "tags": args.tags,
            },
            pulumi.ResourceOptions(parent=self),
        )
        self.vm = declare.azure(
            "compute:VirtualMachine",
            f"{name}-vm",
            {
                "vmName": args.vm_name,
                "resourceGroupName": args.resource_group_name,
                "location": args.location,
                "zones": [args.zone] if args.zone else None,
                "hardwareProfile": {"vmSize": args.vm_size},
                "identity": {"type": "UserAssigned", "userAssignedIdentities": [args.identity_id]},
                "securityProfile": {"encryptionAtHost": VM_SIZES[args.vm_size].encryption_at_host},
                "storageProfile": {
                    "imageReference": {"id": args.image_id},
                    "osDisk": {
                        "name": f"{args.vm_name}-os",
                        "createOption": "FromImage",
                        "deleteOption": "Delete",
                        "diskSizeGB": args.os_disk_gb,
                        "managedDisk": {"storageAccountType": "Premium_LRS"},
                    },
                },
                "networkProfile": {
                    "networkInterfaces": [
                        {
                            "id": self.nic.id,
                            "primary": True,
                            "deleteOption": "Delete" if runbook else "Detach",
                        }
                    ]
                },
                "osProfile": {
                    "computerName": args.vm_name,
                    "adminUsername": ADMIN_USERNAME,
                    "customData": args.custom_data,
                    "linuxConfiguration": linux_ssh_only(args.admin_ssh_public_key),
                },
                # Azure tag names cannot hold "/".
                "tags": {**args.tags, CLOUD_INIT_TAG: args.custom_data_fingerprint},
            },
            pulumi.ResourceOptions(
                parent=self,
                # Azure refuses to change a VM's SSH keys (PropertyChangeNotAllowed): a new adminSshPublicKey
                # reaches VMs created afterwards; existing ones get it with `az vm user update`
                # (docs/runbooks/rotate-ssh-key.md).
                ignore_changes=([] if rolled else [CUSTOM_DATA_PATH])
                + [SSH_KEYS_PATH]
                + ([] if rolled else [IMAGE_PATH]),
                replace_on_changes=(["hardwareProfile.vmSize"] if runbook else [])
                + ([CUSTOM_DATA_PATH, IMAGE_PATH] if rolled else [])
                or None,
                delete_before_replace=not runbook,
            ),
            outputs=["name"],
        )
        self.register_outputs({"privateIp": self.private_ip, "vmId": self.vm.id})
