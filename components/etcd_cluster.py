"""One etcd cluster (used twice: main and Events): a dedicated VM per member, certificates, backups.

Every member gets a server and a peer certificate from its cluster's etcd CA, stored in Key Vault for
its role's identity only; its cloud-init (rendered up front by ``infra.assembly.desired_cluster``) names those
secrets but carries none. The VMs are protected and ignore changes to their cloud-init: a
changed rendering shows up in the ``supercluster.io_cloud-init`` tag and is rolled out one
member at a time by the runbook (docs/runbooks/etcd-rolling-change.md), never by replacing every member at once.
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi

from components.etcd_backups import EtcdBackupStore
from components.etcd_pki import EtcdPki
from components.machines import DedicatedVm, VmArgs
from components.secret_store import SecretStore
from infra.assembly.desired_cluster import DedicatedMachine
from infra.day2.deploy_rules import MACHINE_ROLE_TAG
from infra.etcd import certificates
from infra.etcd.spec import EtcdClusterSpec


class EtcdCluster(pulumi.ComponentResource):
    client_urls: list[str]  # https://<member ip>:2379, in member order; known at plan time
    members: list[DedicatedVm]

    def __init__(
        self,
        name: str,
        *,
        cluster: EtcdClusterSpec,
        machines: Sequence[DedicatedMachine],
        resource_group_name: pulumi.Input[str],
        location: str,
        subnet_id: pulumi.Input[str],
        identity_id: pulumi.Input[str],
        principal_id: pulumi.Input[str],
        etcd_pki: EtcdPki,
        secrets: SecretStore,
        backups: EtcdBackupStore,
        admin_ssh_public_key: str,
        image_id: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """``machines``: the members as the assembly rendered them (``Cluster.machines_of(roles.ETCD)``)."""
        super().__init__("supercluster:etcd:EtcdCluster", name, None, opts)
        self.spec = cluster
        self.client_urls = cluster.client_urls
        readers = {cluster.role: principal_id}
        backups.add_container(self, f"{name}-backup-container", cluster.backup_container, cluster.role, principal_id)
        self.members = []
        for member, m in zip(cluster.members, machines, strict=True):
            member_name = f"{name}-{member.index}"
            for kind, profile in (
                ("server", certificates.server_profile(member)),
                ("peer", certificates.peer_profile(member)),
            ):
                issued = etcd_pki.issue(self, cluster.role, f"{member_name}-{kind}", profile)
                for part, value in (("crt", issued.cert_pem), ("key", issued.private_key_pem)):
                    secrets.add_secret(
                        self,
                        f"{member_name}-{kind}-{part}-secret",
                        certificates.member_secret_name(member, kind, part),
                        value,
                        readers=readers,
                    )
            self.members.append(
                DedicatedVm(
                    member_name,
                    VmArgs(
                        resource_group_name=resource_group_name,
                        location=location,
                        vm_name=m.name,
                        vm_size=m.size,
                        subnet_id=subnet_id,
                        private_ip=m.address,
                        identity_id=identity_id,
                        custom_data=m.custom_data,
                        custom_data_fingerprint=m.fingerprint,
                        admin_ssh_public_key=admin_ssh_public_key,
                        image_id=image_id,
                        zone=m.zone,
                        tags={MACHINE_ROLE_TAG: cluster.role},
                        lifecycle=m.lifecycle,
                    ),
                    # A member's disk is its state: never deleted or replaced by a `pulumi up`. (Its boot
                    # retries the Key Vault and Blob calls until its secrets and role assignments exist.)
                    opts=pulumi.ResourceOptions(parent=self, protect=True),
                )
            )
        self.register_outputs({"clientUrls": self.client_urls, "privateIps": [member.ip for member in cluster.members]})
