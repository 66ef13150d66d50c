"""Cluster-admin access that no file, state or output keeps: a certificate minted on demand, for hours.

The program stores no administrator credential. Whoever needs ``system:masters`` (the deploy's kubernetes
provider, an operator in break-glass) makes a key pair where they are, and an apiserver VM signs its CSR
with the cluster CA through Azure Run Command (``machine/control_plane/sign_client.py``, sent with the
request, never installed): on an instance of the apiserver scale set (whichever answers first; instances come
and go with repairs, so they are listed at the time) or, on a stack still retiring them, an apiserver VM. The
CA key stays where it already is (Key Vault, and the apiservers, whose identity alone reads it); the private
key never leaves the requester. Running a command on an apiserver already means root next to the CA key, so
the credential gives nobody more than they had: the deployer is Contributor, an operator needs Virtual
Machine Contributor on the apiserver scale set.

The kubernetes provider's kubeconfig names the command (``exec``), not a credential, so the state holds
the server, the CA certificate and a command line: nothing to steal. Pure: the shell is ``plan/credential.py``.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Sequence

import machine
from infra.boot import yaml_text
from infra.control_plane import kubeconfig, pki

SIGNER_PROGRAM = "control_plane/sign_client.py"
# The signer refuses more (machine/control_plane/sign_client.py MAX_HOURS, checked by a test against it).
MAX_HOURS = 8
# A deploy runs well within this; client-go runs the command again once the certificate has expired.
DEPLOY_HOURS = 2
BREAK_GLASS_HOURS = 1
DEPLOY_USER = "supercluster-deploy"
BREAK_GLASS_PREFIX = "break-glass:"
# The command the kubernetes provider runs (client-go's exec credential plugin), from the project root,
# where Pulumi starts the program and its provider plugins.
CREDENTIAL_MODULE = "plan.credential"
EXEC_API_VERSION = "client.authentication.k8s.io/v1"
_END = "SUPERCLUSTER_END_OF_INPUT"


def break_glass_user(name: str) -> str:
    """The user every request of the operator's is audited as."""
    return f"{BREAK_GLASS_PREFIX}{name}"


def signing_script(
    user: str,
    hours: int,
    csr_pem: str,
    ca_cert: str = pki.cert_path(pki.CLUSTER_CA),
    ca_key: str = pki.key_path(pki.CLUSTER_CA),
) -> str:
    """The shell script Run Command runs as root on an apiserver VM: the signer and the request inline,
    the certificates on stdout. Nothing is written outside a temporary file removed on exit."""
    program = machine.path(SIGNER_PROGRAM).read_text()
    if _END in program or _END in csr_pem:
        raise ValueError(f"{_END} may not appear in the signer or the request")
    return "\n".join(
        [
            "set -eu",
            "signer=$(mktemp) && trap 'rm -f \"$signer\"' EXIT",
            f"cat > \"$signer\" <<'{_END}'",
            program.rstrip("\n"),
            _END,
            f"python3 \"$signer\" '{user}' {int(hours)} '{ca_cert}' '{ca_key}' <<'{_END}'",
            csr_pem.rstrip("\n"),
            _END,
            "",
        ]
    )


def run_command(resource_group: str, vm_name: str, script: str) -> list[str]:
    """``az vm run-command invoke`` on a VM (RunShellScript runs as root; learn.microsoft.com "Run scripts in
    your Linux VM by using action Run Commands")."""
    return ["az", "vm", "run-command", "invoke", "--resource-group", resource_group, "--name", vm_name,
            *_shell_script(script)]  # fmt: skip


def instance_run_command(resource_group: str, scale_set: str, instance_id: str, script: str) -> list[str]:
    """``az vmss run-command invoke`` on one scale-set instance (the same action Run Command)."""
    return ["az", "vmss", "run-command", "invoke", "--resource-group", resource_group, "--name", scale_set,
            "--instance-id", instance_id, *_shell_script(script)]  # fmt: skip


def list_instances(resource_group: str, scale_set: str) -> list[str]:
    """``az vmss list-instances``, the instance ids only, as a JSON list."""
    return ["az", "vmss", "list-instances", "--resource-group", resource_group, "--name", scale_set,
            "--query", "[].instanceId", "--output", "json"]  # fmt: skip


def _shell_script(script: str) -> list[str]:
    return ["--command-id", "RunShellScript", "--scripts", script, "--output", "json"]


_PEM = re.compile(r"-----BEGIN CERTIFICATE-----\n.+?\n-----END CERTIFICATE-----\n?", re.DOTALL)


def certificates_from(run_command_output: str) -> tuple[str, str]:
    """``(client certificate, CA certificate)`` from Run Command's JSON, whose one message holds the script's
    ``[stdout]`` and ``[stderr]``; a ``ValueError`` with stderr when the script signed nothing."""
    message = "".join(status.get("message", "") for status in json.loads(run_command_output).get("value", []))
    stdout, _, stderr = message.partition("[stderr]")
    found = [pem.strip() + "\n" for pem in _PEM.findall(stdout)]
    if len(found) != 2:
        raise ValueError(f"the apiserver signed nothing: {stderr.strip() or message.strip()}")
    return found[0], found[1]


def exec_credential(cert_pem: str, key_pem: str, expires: datetime.datetime) -> str:
    """What client-go reads from an exec plugin's stdout (kubernetes.io "client-go credential plugins")."""
    return json.dumps(
        {
            "apiVersion": EXEC_API_VERSION,
            "kind": "ExecCredential",
            "status": {
                "clientCertificateData": cert_pem,
                "clientKeyData": key_pem,
                "expirationTimestamp": expires.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
        }
    )


def deploy_kubeconfig(
    server: str, ca_pem: str, resource_group: str, scale_set: str, vm_names: Sequence[str] = ()
) -> str:
    """The kubernetes provider's kubeconfig: the server, its CA and the command that mints the deploy's
    credential on an instance of ``scale_set`` or any of ``vm_names`` (the first that answers). No credential:
    safe in state and plans."""
    args = ["-m", CREDENTIAL_MODULE, "exec", "--resource-group", resource_group, "--scale-set", scale_set]
    for name in vm_names:
        args += ["--vm", name]
    user = {
        "exec": {
            "apiVersion": EXEC_API_VERSION,
            "command": "python3",
            "args": args,
            "interactiveMode": "Never",
            "provideClusterInfo": False,
        }
    }
    return yaml_text.dump(
        kubeconfig.document(server, DEPLOY_USER, {"certificate-authority-data": kubeconfig.b64(ca_pem)}, user),
        sort_keys=False,
    )
