"""A dedicated VM with a static private IP: the shape shared by etcd members, apiservers and NAT hosts.

No public IP, ever; SSH only through the hub (NSGs in components/network.py); the
VM's only identity is its role's user-assigned identity, which is what lets its
boot script read its own Key Vault secrets and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_azure_native as azure

from infra.versions import UBUNTU_IMAGE
from infra.vm_sizes import VM_SIZES

ADMIN_USERNAME = "azureuser"
SSH_KEYS_PATH = "osProfile.linuxConfiguration.ssh.publicKeys"


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
    zone: str | None = None
    os_disk_gb: int = 64
    image: dict = field(default_factory=lambda: dict(UBUNTU_IMAGE))
    enable_ip_forwarding: bool = False
    backend_pool_ids: list[pulumi.Input[str]] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)
    # Stateful roles (etcd) keep running when their cloud-init changes; the change is rolled
    # out one member at a time by the runbook instead of by a replacement of every member.
    ignore_custom_data_changes: bool = False
    # Stateless roles (apiservers) are rolled by `pulumi up --replace`, one VM at a time (README runbook):
    # the old VM is deleted first (its name and static IP are fixed) and its NIC is detached, not
    # deleted, so the IP and load-balancer membership carry over to the new VM.
    replaceable: bool = False
    # A resize restarts the VM, on a host whose local NVMe is blank, and `pulumi up` would resize every member
    # of a role at once. For etcd that loses quorum, so a size change is declared a replacement: protection
    # stops it, the plan diff flags it, and the runbook resizes one member at a time.
    resize_replaces: bool = False


def linux_ssh_only(admin_ssh_public_key: str) -> azure.compute.LinuxConfigurationArgs:
    """The break-glass admin user: SSH key only, never a password (VMs and scale sets alike)."""
    return azure.compute.LinuxConfigurationArgs(
        disable_password_authentication=True,
        ssh=azure.compute.SshConfigurationArgs(public_keys=[azure.compute.SshPublicKeyArgs(
            path=f"/home/{ADMIN_USERNAME}/.ssh/authorized_keys",
            key_data=admin_ssh_public_key,
        )]),
    )


class DedicatedVm(pulumi.ComponentResource):
    nic: azure.network.NetworkInterface
    vm: azure.compute.VirtualMachine
    private_ip: str

    def __init__(self, name: str, args: VmArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("supercluster:machines:DedicatedVm", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.private_ip = args.private_ip
        self.nic = azure.network.NetworkInterface(
            f"{name}-nic",
            network_interface_name=f"{args.vm_name}-nic",
            resource_group_name=args.resource_group_name,
            location=args.location,
            enable_accelerated_networking=True,
            enable_ip_forwarding=args.enable_ip_forwarding,
            ip_configurations=[azure.network.NetworkInterfaceIPConfigurationArgs(
                name="primary",
                primary=True,
                private_ip_allocation_method="Static",
                private_ip_address=args.private_ip,
                subnet=azure.network.SubnetArgs(id=args.subnet_id),
                load_balancer_backend_address_pools=[
                    azure.network.BackendAddressPoolArgs(id=pool_id) for pool_id in args.backend_pool_ids
                ] or None,
            )],
            tags=args.tags,
            opts=child,
        )
        self.vm = azure.compute.VirtualMachine(
            f"{name}-vm",
            vm_name=args.vm_name,
            resource_group_name=args.resource_group_name,
            location=args.location,
            zones=[args.zone] if args.zone else None,
            hardware_profile=azure.compute.HardwareProfileArgs(vm_size=args.vm_size),
            identity=azure.compute.VirtualMachineIdentityArgs(
                type="UserAssigned",
                user_assigned_identities=[args.identity_id],
            ),
            security_profile=azure.compute.SecurityProfileArgs(
                encryption_at_host=VM_SIZES[args.vm_size].encryption_at_host,
            ),
            storage_profile=azure.compute.StorageProfileArgs(
                image_reference=azure.compute.ImageReferenceArgs(**args.image),
                os_disk=azure.compute.OSDiskArgs(
                    name=f"{args.vm_name}-os",
                    create_option="FromImage",
                    delete_option="Delete",
                    disk_size_gb=args.os_disk_gb,
                    managed_disk=azure.compute.ManagedDiskParametersArgs(storage_account_type="Premium_LRS"),
                ),
            ),
            network_profile=azure.compute.NetworkProfileArgs(network_interfaces=[
                azure.compute.NetworkInterfaceReferenceArgs(
                    id=self.nic.id, primary=True,
                    delete_option="Detach" if args.replaceable else "Delete"),
            ]),
            os_profile=azure.compute.OSProfileArgs(
                computer_name=args.vm_name,
                admin_username=ADMIN_USERNAME,
                custom_data=args.custom_data,
                linux_configuration=linux_ssh_only(args.admin_ssh_public_key),
            ),
            # Azure tag names cannot hold "/".
            tags={**args.tags, "supercluster.io_cloud-init": args.custom_data_fingerprint},
            opts=pulumi.ResourceOptions(
                parent=self,
                # Azure refuses to change a VM's SSH keys (PropertyChangeNotAllowed): a new adminSshPublicKey
                # reaches VMs created afterwards; existing ones get it with `az vm user update` (README runbook).
                ignore_changes=(["osProfile.customData"] if args.ignore_custom_data_changes else []) + [SSH_KEYS_PATH],
                replace_on_changes=["hardwareProfile.vmSize"] if args.resize_replaces else None,
                delete_before_replace=args.replaceable,
            ),
        )
        self.register_outputs({"privateIp": self.private_ip, "vmId": self.vm.id})
