"""The cluster in a box's stand-in for Azure's instance metadata service (IMDS) at its platform address.

It answers the requests the machines' rendered scripts make: the VM's compute metadata (its
subscription and resource group, from which ``machine/shared/imds_token.py`` builds its role
identity's resource ID, and for a machine of the box's VM directory its name, ``vmId`` and
``resourceId``, which ``machine/node/node_join.py`` claims), a managed-identity access token, the
network metadata an apiserver reads its own address from at boot
(``machine/control_plane/serving_identity.py``), and the attested document a joining node sends with
its client CSR. As IMDS answers each VM about itself, every answer is about the requester: the source
address of the request, which on the box's switch is the address the host holds. Like IMDS it refuses
a request without the ``Metadata: true`` header (learn.microsoft.com/azure/virtual-machines/instance-metadata-service,
"Security and authentication") and answers nothing else. A token is handed out only for an identity the
requesting machine carries: the request's ``msi_res_id`` must be one of the user-assigned identities the plan
attaches to the machine at that address (``IDENTITIES_FILE``, written from the plan by tests/e2e/attestation.py);
any other, or none, is answered 400 as IMDS answers a VM for an identity it does not carry, so a machine that asks
for the wrong identity gets no token in the box either. The token itself is a fixed stand-in, which the stand-in
Resource Manager and Key Vault below check. Without an answer, kubelet's run of the image credential provider waits
out its one-minute exec deadline on every pod start (docs/cluster-in-a-box.md).

The attested document is what Azure signs (PKCS #7 SignedData, the JSON inside: ``nonce``, ``vmId``,
``subscriptionId``, ``sku``, ``plan``, ``licenseType``, ``timeStamp`` with ``createdOn`` and ``expiresOn``
six hours later, as ``MM/DD/YY HH:MM:SS -0000``), signed with the box's test signer
(``tests/e2e/attestation.py``) in place of Azure's ``metadata.azure.com`` certificate.

With the folder, it also stands in for Azure Resource Manager on ``ARM_PORT`` (HTTPS, a certificate for its
address from the box's attestation root): a GET of a VM's resource ID, with the stand-in token, answers the VM's
``properties.vmId`` and ``properties.osProfile.computerName`` (and a standalone VM's
``properties.networkProfile``), and a GET of a scale-set instance's ``networkInterfaces`` or of a standalone VM's
NIC answers its NIC, the machine's address as the primary IP configuration and its pods' as secondary ones, as the
node certificates' approver asks (``machine/control_plane/csr_approver.py``); any other ID is 404. The compute
metadata names the VM as Azure does (its group, a scale set's instance as ``<scale set>_<instance>``), so the
node's own ``machine/node/provider_id.py`` writes its real providerID. On the same port it stands in for Key Vault's
secrets: a PUT of ``/secrets/<name>`` with the stand-in token and a ``value`` keeps that value in
``VAULT_FILE`` in the folder (each name's latest version), as the apiservers' bootstrap-token minter writes the
nodes' token (``machine/control_plane/token_minter.py``); the harness reads it from there; and a GET of
``/secrets/<name>`` with the stand-in token answers that value, as a machine's fetch script reads it (a test that
runs a fetch script puts the machine's other secrets there first: ``Attestation.put_in_vault``).

Run on the box's IMDS host: ``python imds.py ADDRESS PORT [ATTESTATION_DIR]`` (``infra.node.cni.IMDS_IP`` and
``IMDS_PORT``; the folder tests/e2e/attestation.py writes), with the project on ``PYTHONPATH`` (it imports
tests/helpers.py).
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import ssl
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from tests.helpers import json_reply, loopback_server

SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"  # a stand-in: no Azure subscription here
RESOURCE_GROUP = "cluster-in-a-box"
ACCESS_TOKEN = "cluster-in-a-box-imds-token"  # a stand-in, never a credential
ANSWERS = {"/metadata/instance/compute": {"subscriptionId": SUBSCRIPTION, "resourceGroupName": RESOURCE_GROUP}}
TOKEN = "/metadata/identity/oauth2/token"
# IMDS's answer (HTTP 400) to a token request for a user-assigned identity the VM does not carry.
IDENTITY_NOT_FOUND = {"error": "invalid_request", "error_description": "Identity not found"}
NETWORK = "/metadata/instance/network"
COMPUTE = "/metadata/instance/compute"
ATTESTED = "/metadata/attested/document"
ATTESTED_LIFETIME = datetime.timedelta(hours=6)
# The files tests/e2e/attestation.py writes into the folder it is given.
VMS_FILE, SIGNER_CERT, SIGNER_KEY = "vms.json", "signer.crt", "signer.key"
IDENTITIES_FILE = "identities.json"  # {address: [user-assigned identity resource IDs the machine carries]}
ARM_CERT, ARM_KEY = "arm.crt", "arm.key"
ARM_PORT = 8443
VAULT_FILE = "vault.json"  # Key Vault's secrets as the box's writers set them: {name: value}
VAULT_LOCK = threading.Lock()
ATTESTATION_DIR: Path | None = None
IMDS_HOST_NAME = "cluster-in-a-box.vault.azure.net"  # the id a stand-in answer names


def azure_time(moment: datetime.datetime) -> str:
    return moment.strftime("%m/%d/%y %H:%M:%S -0000")


def attested_document(nonce: str, vm_id: str, directory: Path) -> str:
    """The ``signature`` IMDS answers: base64 DER of a PKCS #7 SignedData holding the document."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.serialization import pkcs7

    now = datetime.datetime.now(datetime.UTC)
    document = {
        "licenseType": "",
        "nonce": nonce,
        "plan": {"name": "", "product": "", "publisher": ""},
        "sku": "",
        "subscriptionId": SUBSCRIPTION,
        "timeStamp": {"createdOn": azure_time(now), "expiresOn": azure_time(now + ATTESTED_LIFETIME)},
        "vmId": vm_id,
    }
    cert = x509.load_pem_x509_certificate((directory / SIGNER_CERT).read_bytes())
    key = serialization.load_pem_private_key((directory / SIGNER_KEY).read_bytes(), None)
    signed = (
        pkcs7.PKCS7SignatureBuilder()
        .set_data(json.dumps(document).encode())
        .add_signer(cert, key, hashes.SHA256())  # type: ignore[arg-type]
        .sign(serialization.Encoding.DER, [])
    )
    return base64.b64encode(signed).decode()


def vms() -> dict[str, dict[str, Any]]:
    """The box's VM directory: ``{address: {name, vmId, resourceId, ips}}`` (tests/e2e/attestation.py)."""
    if ATTESTATION_DIR is None or not (ATTESTATION_DIR / VMS_FILE).exists():
        return {}
    return json.loads((ATTESTATION_DIR / VMS_FILE).read_text())


def carried(address: str) -> set[str]:
    """The user-assigned identities the machine at ``address`` carries, lower-cased (Azure's resource IDs are not
    case-sensitive); none without the folder or the file."""
    path = ATTESTATION_DIR / IDENTITIES_FILE if ATTESTATION_DIR is not None else None
    if path is None or not path.exists():
        return set()
    return {identity.lower() for identity in json.loads(path.read_text()).get(address, [])}


def compute_of(vm: dict[str, Any]) -> dict[str, Any]:
    """IMDS's compute metadata of a VM of the directory, its names read from its resource ID as Azure gives
    them: its group, and a scale set's instance named ``<scale set>_<instance id>``."""
    parts = vm["resourceId"].split("/")
    group, kind, name = parts[4], parts[7], parts[8]
    scale_set = name if kind == "virtualMachineScaleSets" else ""
    return {
        "resourceGroupName": group,
        "vmScaleSetName": scale_set,
        "name": f"{scale_set}_{parts[10]}" if scale_set else name,
        "osProfile": {"computerName": vm["name"]},
        "vmId": vm["vmId"],
        "resourceId": vm["resourceId"],
    }


def nic_id(vm: dict[str, str]) -> str:
    """A standalone VM's NIC, as its network profile names it."""
    group, name = vm["resourceId"].split("/")[4], vm["resourceId"].rsplit("/", 1)[1] + "-nic"
    return f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{group}/providers/Microsoft.Network/networkInterfaces/{name}"


def nic_of(vm: dict[str, Any]) -> dict[str, Any]:
    """The VM's NIC as Resource Manager answers it: its address the primary IP configuration, its pods' secondary."""
    configurations = [
        {"name": f"ipconfig{i}", "properties": {"privateIPAddress": ip, "primary": i == 0}}
        for i, ip in enumerate(vm.get("ips", []))
    ]
    return {"name": "nic", "properties": {"ipConfigurations": configurations}}


class Handler(BaseHTTPRequestHandler):
    def machine_address(self) -> str:
        """The address of the machine asking (a test may stand in another)."""
        return self.client_address[0]

    def vm(self) -> dict[str, str] | None:
        """The requester's entry in the box's VM directory, if it has one."""
        return vms().get(self.machine_address())

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        url = urlparse(self.path)
        answer = ANSWERS.get(url.path)
        vm = self.vm()
        if url.path == NETWORK:
            answer = self._network()
        elif url.path == COMPUTE and vm:
            answer = {**ANSWERS[COMPUTE], **compute_of(vm)}
        elif url.path == ATTESTED and vm and ATTESTATION_DIR is not None:
            nonce = parse_qs(url.query).get("nonce", [""])[0]
            answer = {"encoding": "pkcs7", "signature": attested_document(nonce, vm["vmId"], ATTESTATION_DIR)}
        elif url.path == TOKEN:
            asked = parse_qs(url.query).get("msi_res_id", [""])[0]
            carries = asked.lower() in carried(self.machine_address())
            answer = {"access_token": ACCESS_TOKEN, "token_type": "Bearer"} if carries else None
        if self.headers.get("Metadata") != "true":
            self._reply(400, {"error": "bad_request", "error_description": "Required metadata header not specified"})
        elif url.path == TOKEN and answer is None:
            self._reply(400, IDENTITY_NOT_FOUND)
        elif answer is None:
            self._reply(404, {"error": "not_found"})
        else:
            self._reply(200, answer)

    def _network(self) -> dict[str, Any]:
        """The primary NIC's primary address, in IMDS's shape (interface / ipv4 / ipAddress)."""
        address = {"privateIpAddress": self.machine_address(), "publicIpAddress": ""}
        return {"interface": [{"ipv4": {"ipAddress": [address], "subnet": []}, "ipv6": {"ipAddress": []}}]}

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        json_reply(self, status, body)


class ResourceManager(Handler):
    """Azure Resource Manager's record of a VM of the box's directory, by its resource ID."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = urlparse(self.path).path.lower()
        known = list(vms().values())
        found = [vm for vm in known if vm["resourceId"].lower() == path]
        listed = [vm for vm in known if f"{vm['resourceId']}/networkInterfaces".lower() == path and _in_scale_set(vm)]
        nics = [vm for vm in known if nic_id(vm).lower() == path and not _in_scale_set(vm)]
        if self.headers.get("Authorization") != f"Bearer {ACCESS_TOKEN}":
            self._reply(401, {"error": {"code": "AuthenticationFailed"}})
        elif path.startswith("/secrets/"):
            self._get_secret(urlparse(self.path).path.removeprefix("/secrets/"))
        elif found:
            (vm,) = found
            properties: dict[str, Any] = {"vmId": vm["vmId"], "osProfile": {"computerName": vm["name"]}}
            if not _in_scale_set(vm):
                properties["networkProfile"] = {"networkInterfaces": [{"id": nic_id(vm)}]}
            self._reply(
                200, {"id": vm["resourceId"], "name": vm["resourceId"].rsplit("/", 1)[1], "properties": properties}
            )
        elif listed:
            self._reply(200, {"value": [nic_of(listed[0])]})
        elif nics:
            self._reply(200, {"id": nic_id(nics[0]), **nic_of(nics[0])})
        else:
            self._reply(404, {"error": {"code": "ResourceNotFound"}})

    def _get_secret(self, name: str) -> None:
        """Key Vault's Get Secret (learn.microsoft.com/rest/api/keyvault/secrets/get-secret): the latest version
        kept in ``VAULT_FILE``, 404 ``SecretNotFound`` for a name it does not hold."""
        stored = ATTESTATION_DIR / VAULT_FILE if ATTESTATION_DIR is not None else None
        with VAULT_LOCK:
            secrets = json.loads(stored.read_text()) if stored is not None and stored.exists() else {}
        if name in secrets:
            self._reply(200, {"value": secrets[name], "id": f"https://{IMDS_HOST_NAME}/secrets/{name}"})
        else:
            self._reply(404, {"error": {"code": "SecretNotFound"}})

    def do_PUT(self) -> None:  # noqa: N802 - http.server's name
        """Key Vault's Set Secret (learn.microsoft.com/rest/api/keyvault/secrets/set-secret)."""
        path = urlparse(self.path).path
        name = path.removeprefix("/secrets/")
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        if self.headers.get("Authorization") != f"Bearer {ACCESS_TOKEN}":
            self._reply(401, {"error": {"code": "Unauthorized"}})
        elif ATTESTATION_DIR is None or not path.startswith("/secrets/") or "/" in name or "value" not in body:
            self._reply(400, {"error": {"code": "BadParameter"}})
        else:
            with VAULT_LOCK:
                stored = ATTESTATION_DIR / VAULT_FILE
                secrets = json.loads(stored.read_text()) if stored.exists() else {}
                secrets[name] = body["value"]
                stored.with_suffix(".tmp").write_text(json.dumps(secrets))
                stored.with_suffix(".tmp").replace(stored)
            self._reply(200, {"id": f"https://{IMDS_HOST_NAME}/secrets/{name}", "attributes": {"enabled": True}})


def _in_scale_set(vm: dict[str, str]) -> bool:
    return "/virtualMachineScaleSets/" in vm["resourceId"]


@contextlib.contextmanager
def on_loopback(handler: type[Handler], directory: Path) -> Iterator[str]:
    """For a fast test: ``handler`` (the stand-in or a part of it), quiet, on a free loopback port over plain HTTP,
    reading and writing ``directory``; yields its URL."""
    global ATTESTATION_DIR
    before, ATTESTATION_DIR = ATTESTATION_DIR, directory
    quiet = type("Quiet", (handler,), {"log_message": lambda self, *args: None})
    try:
        with loopback_server(quiet) as url:
            yield url
    finally:
        ATTESTATION_DIR = before


def serve_resource_manager(address: str, directory: Path) -> None:
    server = ThreadingHTTPServer((address, ARM_PORT), ResourceManager)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(directory / ARM_CERT, directory / ARM_KEY)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()


if __name__ == "__main__":
    ATTESTATION_DIR = Path(sys.argv[3]) if len(sys.argv) > 3 else None
    if ATTESTATION_DIR is not None:
        serve_resource_manager(sys.argv[1], ATTESTATION_DIR)
    ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), Handler).serve_forever()
