"""How private keys and tokens reach a machine without ever passing through customData.

Each VM role has its own user-assigned managed identity, allowed to read only its
own Key Vault secrets. At every boot, before any Kubernetes or etcd service, the
``supercluster-secrets`` unit asks the instance metadata service for a Key Vault
token as the role identity (``supercluster-imds-token``, which names the identity
explicitly, since a VM may carry more than one) and writes each secret to its path.
customData therefore names secrets but never carries one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import machine
from infra.boot import systemd
from infra.boot.cloudinit import CloudConfig
from machine.shared import imds_token

FETCH_SCRIPT_PATH = "/usr/local/sbin/supercluster-fetch-secrets"
FETCH_UNIT = "supercluster-secrets.service"
# Key Vault data-plane API version (learn.microsoft.com/rest/api/keyvault, "Get Secret").
KEY_VAULT_API_VERSION = "7.4"
# Each secret's read is retried this often, this far apart (any error: Key Vault or the network briefly away).
FETCH_RETRIES = 30
FETCH_RETRY_DELAY_SECONDS = 2
# Defined by the program itself (machine/shared/imds_token.py), which needs them without settings.
IMDS_TOKEN_SCRIPT = imds_token.INSTALLED_PATH
IDENTITY_FILE = imds_token.DEFAULT_IDENTITY_FILE
_IMDS_TOKEN_SOURCE = machine.path("shared/imds_token.py")


@dataclass(frozen=True)
class SecretFile:
    """One Key Vault secret and where it lands on the machine."""

    secret_name: str  # Key Vault secret names: 1-127 letters, digits and '-'
    path: str
    mode: str = "0600"

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9-]{1,127}", self.secret_name):
            raise ValueError(f"invalid Key Vault secret name {self.secret_name!r}")


def fetch_script(vault_name: str, secrets: Sequence[SecretFile]) -> str:
    lines = [
        "#!/bin/bash",
        "# Written by supercluster: fetches this machine's secrets from Key Vault with its managed identity.",
        "set -euo pipefail",
        f"vault=https://{vault_name}.vault.azure.net",
        "fetch() {  # fetch NAME PATH MODE",
        "  local tmp",
        '  tmp=$(mktemp -p "$(dirname "$2")")',
        f"  curl -sf --retry {FETCH_RETRIES} --retry-delay {FETCH_RETRY_DELAY_SECONDS} --retry-all-errors"
        ' -H "Authorization: Bearer $TOKEN" \\',
        f'    "$vault/secrets/$1?api-version={KEY_VAULT_API_VERSION}" \\',
        '    | python3 -c \'import json,sys; sys.stdout.write(json.load(sys.stdin)["value"])\' > "$tmp"',
        '  chmod "$3" "$tmp"',
        '  mv "$tmp" "$2"',
        "}",
        f"TOKEN=$({IMDS_TOKEN_SCRIPT} https://vault.azure.net)",
    ]
    for secret in sorted(secrets, key=lambda s: s.path):
        directory = secret.path.rsplit("/", 1)[0]
        lines.append(f"install -d -m 0700 {directory}")
        lines.append(f"fetch {secret.secret_name} {secret.path} {secret.mode}")
    return "\n".join(lines) + "\n"


def add_identity(cloud: CloudConfig, identity: str) -> None:
    """Names the machine's role identity (its resource ID below the subscription,
    ``naming.role_identity_below_subscription``) and installs the token helper every boot script uses."""
    cloud.add(IDENTITY_FILE, identity + "\n")
    cloud.add(IMDS_TOKEN_SCRIPT, _IMDS_TOKEN_SOURCE.read_text(), permissions="0755", compressed=True)


def add_secret_fetching(
    cloud: CloudConfig, vault_name: str, secrets: Sequence[SecretFile], before: Sequence[str], identity: str
) -> None:
    """Adds the role identity, the fetch script and the boot unit that runs it ahead of ``before``."""
    add_identity(cloud, identity)
    cloud.add(FETCH_SCRIPT_PATH, fetch_script(vault_name, secrets), permissions="0700", compressed=True)
    cloud.add(
        f"/etc/systemd/system/{FETCH_UNIT}",
        systemd.unit(
            "Fetch this machine's secrets from Key Vault (managed identity)",
            [FETCH_SCRIPT_PATH],
            after=["network-online.target"],
            wants=["network-online.target"],
            service={"Type": "oneshot", "RemainAfterExit": "true", "Restart": "on-failure", "RestartSec": "10"},
            unit_extra={"Before": " ".join(before)},
        ),
    )
    cloud.runcmd.append(["systemctl", "enable", "--now", FETCH_UNIT])


def add_boot_program(
    cloud: CloudConfig,
    *,
    unit: str,
    description: str,
    script: str,
    source: str,
    config: str,
    settings: str,
    service: dict[str, str],
    after: tuple[str, ...] = (),
    compress_program: bool = False,
    compress_settings: bool = False,
) -> None:
    """A program of ``machine/`` (``source``), its settings file and the unit that runs it with them once the
    secrets are fetched (and after the units in ``after``), at every boot. ``service`` holds what differs: a
    oneshot or a long-running program, whether systemd restarts it, and its sandboxing. A compressed file takes
    a third of its size in customData, which is near Azure's limit on nodes and apiservers."""
    cloud.add(script, machine.source(source), permissions="0755", compressed=compress_program)
    cloud.add(config, settings, permissions="0644", compressed=compress_settings)
    cloud.add(
        f"/etc/systemd/system/{unit}",
        systemd.unit(
            description,
            [script, config],
            after=["network-online.target", FETCH_UNIT, *after],
            wants=["network-online.target", FETCH_UNIT],
            service=service,
        ),
        permissions="0644",
    )
