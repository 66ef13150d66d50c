"""The box's stand-in for Azure's word on which VM is which: a signer for IMDS's attested documents and the
directory of the box's VMs.

On Azure, IMDS signs each VM's attested document with its ``metadata.azure.com`` certificate, which chains to
a public root, and Azure Resource Manager says which VM holds a ``vmId``. In the box a test root and a signer
named like Azure's stand in for that chain (docs/cluster-in-a-box.md), and ``vms.json`` maps each machine's
address to its name, ``vmId`` (derived from its resource ID), resource ID and NIC addresses (its own, then its
pods'), and ``identities.json`` each machine's address to the user-assigned identities the plan attaches to it; the
IMDS stand-in
(``tests/e2e/imds.py``) reads both from the folder, and answers as Resource Manager too, over HTTPS with a
certificate from the same root, and as Key Vault for the writes of the apiservers' bootstrap-token minter.
``approver_config`` and ``minter_config`` are what the box changes in each apiserver's copy of those programs'
settings so that they trust that root and ask that stand-in.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from infra.node.cni import IMDS_IP
from tests.e2e import imds
from tests.e2e.pki import issue
from tests.e2e.plan_machines import Machine

SIGNER_NAME = "metadata.azure.com"  # the subject of Azure's attested-data signing certificate
ROOT_FILE = "root.crt"
HOURS = 48


def directory_of(workdir: Path) -> Path:
    """Where a box keeps it: under the box's own folder."""
    return workdir / "attestation"


class Attestation:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.root = issue("cluster-in-a-box attestation root", uses=("cert_signing",), hours=HOURS)
        self.signer = issue(SIGNER_NAME, uses=("digital_signature",), hours=HOURS, ca=self.root)
        (directory / ROOT_FILE).write_text(self.root.cert_pem)
        (directory / imds.SIGNER_CERT).write_text(self.signer.cert_pem)
        (directory / imds.SIGNER_KEY).write_text(self.signer.key_pem)
        arm = issue(
            "management.azure.com",
            uses=("digital_signature", "server_auth"),
            hours=HOURS,
            ca=self.root,
            ip_addresses=(IMDS_IP,),
        )
        (directory / imds.ARM_CERT).write_text(arm.cert_pem)
        (directory / imds.ARM_KEY).write_text(arm.key_pem)
        self.vms: dict[str, dict[str, Any]] = {}
        self.identities: dict[str, list[str]] = {}
        self._write()

    @staticmethod
    def vm_id(machine: Machine) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, machine.azure_id))

    def add(self, machine: Machine) -> None:
        """``machine`` becomes a VM IMDS answers for (its compute metadata, its attested document) and Resource
        Manager knows (its record, its NIC)."""
        entry = {
            "name": machine.name,
            "vmId": self.vm_id(machine),
            "resourceId": machine.azure_id,
            "ips": [machine.ip, *machine.pod_ips],
        }
        self.vms[machine.ip] = entry
        self.carry(machine)

    def carry(self, machine: Machine) -> None:
        """The machine, at its address, carries the identities the plan attaches to it: IMDS hands it a token for
        those and refuses any other (``imds.IDENTITIES_FILE``)."""
        self.identities[machine.ip] = list(machine.identities)
        self._write()

    def remove(self, address: str) -> None:
        """The VM at ``address`` is gone: IMDS and Resource Manager know it no more."""
        self.vms.pop(address, None)
        self.identities.pop(address, None)
        self._write()

    def approver_config(self, rendered: dict, root_path: str) -> dict:
        """The approver's settings with the box's root (at ``root_path`` on the machine) for Azure's, and the
        stand-in's address for Resource Manager's."""
        return {
            **rendered,
            "attestation_roots": root_path,
            "arm_ca_file": root_path,
            "arm_endpoint": f"https://{IMDS_IP}:{imds.ARM_PORT}",
        }

    def minter_config(self, rendered: dict, root_path: str) -> dict:
        """The bootstrap-token minter's settings with the stand-in (trusted through the box's root at ``root_path``)
        for Key Vault."""
        return {**rendered, "vault": f"https://{IMDS_IP}:{imds.ARM_PORT}", "vault_ca_file": root_path}

    def vault(self) -> dict[str, str]:
        """What the box's writers put in Key Vault (the stand-in's ``VAULT_FILE``): ``{name: value}``."""
        path = self.directory / imds.VAULT_FILE
        return json.loads(path.read_text()) if path.exists() else {}

    def put_in_vault(self, secrets: dict[str, str]) -> None:
        """``secrets`` join what the box's writers put in the Key Vault stand-in, as the deploy puts a machine's
        secrets in Key Vault, for a test that runs a machine's fetch script; a name already there keeps its value
        (the minter's token stays the minter's)."""
        path = self.directory / imds.VAULT_FILE
        path.with_suffix(".seed").write_text(json.dumps({**secrets, **self.vault()}))
        path.with_suffix(".seed").replace(path)

    def _write(self) -> None:
        for name, content in ((imds.VMS_FILE, self.vms), (imds.IDENTITIES_FILE, self.identities)):
            path = self.directory / name
            path.with_suffix(".tmp").write_text(json.dumps(content, indent=1))
            path.with_suffix(".tmp").replace(path)
