"""Mints a short-lived cluster-admin certificate on an apiserver VM (infra/control_plane/access.py).

Two uses, one path:

    # the deploy's kubernetes provider runs this itself (its kubeconfig's exec entry):
    python3 -m plan.credential exec --resource-group <rg> --scale-set <apiserver scale set> [--vm <vm> ...]
    # an operator, break-glass (docs/runbooks/break-glass-access.md):
    python3 -m plan.credential break-glass --name alice --server https://<lb ip>:6443 \\
        --resource-group <rg> --scale-set <apiserver scale set> --kubeconfig ./alice.kubeconfig

The key pair is made here and the private key never leaves this process (``exec``) or the operator's file
(``break-glass``, mode 0600); an apiserver signs the request through Run Command (``az vmss run-command
invoke`` on a scale-set instance, listed at the time; ``az vm run-command invoke`` on a VM a stack still
retires), as the signed-in Azure identity, which must be allowed to run commands on it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from infra.control_plane import access
from infra.control_plane.kubeconfig import embedded_kubeconfig

# Run Command allows 90 minutes per script; signing takes seconds once the VM agent has the request.
RUN_COMMAND_TIMEOUT_SECONDS = 300

Invoke = Callable[[list[str]], str]


def az(command: list[str]) -> str:
    """Runs an ``az`` command line, its JSON on stdout."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_COMMAND_TIMEOUT_SECONDS)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip() or f"{command[0]} exited {done.returncode}")
    return done.stdout


def mint(
    user: str,
    hours: int,
    resource_group: str,
    vm_names: Sequence[str],
    invoke: Invoke = az,
    scale_sets: Sequence[str] = (),
) -> tuple[str, str, str, datetime.datetime]:
    """``(certificate, private key, CA certificate, expiry)`` for ``user``, signed by the first apiserver that
    signs: each instance of ``scale_sets``, then each of ``vm_names``; every refusal in the error otherwise."""
    key = ec.generate_private_key(ec.SECP256R1())
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, user)]))
        .sign(key, hashes.SHA256())
    )
    csr_pem = request.public_bytes(serialization.Encoding.PEM).decode()
    script = access.signing_script(user, hours, csr_pem)
    failures = []
    targets = []
    for scale_set in scale_sets:
        try:
            instance_ids = json.loads(invoke(access.list_instances(resource_group, scale_set)))
        except (RuntimeError, ValueError, subprocess.TimeoutExpired) as error:
            failures.append(f"{scale_set}: {error}")
            continue
        targets += [
            (f"{scale_set} instance {i}", access.instance_run_command(resource_group, scale_set, str(i), script))
            for i in instance_ids
        ]
    targets += [(vm, access.run_command(resource_group, vm, script)) for vm in vm_names]
    for name, command in targets:
        try:
            certificate, ca = access.certificates_from(invoke(command))
        except (RuntimeError, ValueError, subprocess.TimeoutExpired) as error:
            failures.append(f"{name}: {error}")
            continue
        expires = x509.load_pem_x509_certificate(certificate.encode()).not_valid_after_utc
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode()
        return certificate, key_pem, ca, expires
    raise SystemExit("no apiserver signed the request: " + ("; ".join(failures) or "none was named"))


def main(argv: Sequence[str] | None = None, invoke: Invoke = az) -> None:
    parser = argparse.ArgumentParser(prog="python3 -m plan.credential", description=__doc__.splitlines()[0])
    modes = parser.add_subparsers(dest="mode", required=True)
    for mode in ("exec", "break-glass"):
        sub = modes.add_parser(mode)
        sub.add_argument("--resource-group", required=True)
        sub.add_argument("--scale-set", action="append", default=[], help="the apiserver scale set")
        sub.add_argument("--vm", action="append", default=[], help="an apiserver VM; repeat to try others")
    glass = modes.choices["break-glass"]
    glass.add_argument("--name", required=True, help="who you are: audited as break-glass:<name>")
    glass.add_argument("--server", required=True, help="apiserver.endpoint of the cluster output")
    glass.add_argument("--kubeconfig", required=True, help="file to write (mode 0600)")
    glass.add_argument("--hours", type=int, default=access.BREAK_GLASS_HOURS)
    args = parser.parse_args(argv)
    if args.mode == "exec":
        cert, key, _, expires = mint(
            access.DEPLOY_USER, access.DEPLOY_HOURS, args.resource_group, args.vm, invoke, args.scale_set
        )
        sys.stdout.write(access.exec_credential(cert, key, expires) + "\n")
        return
    user = access.break_glass_user(args.name)
    cert, key, ca, expires = mint(user, args.hours, args.resource_group, args.vm, invoke, args.scale_set)
    descriptor = os.open(args.kubeconfig, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(embedded_kubeconfig(args.server, user, ca, cert, key))
    print(f"{args.kubeconfig}: {user}, system:masters, until {expires:%Y-%m-%d %H:%M} UTC; delete it when done")


if __name__ == "__main__":
    main()
