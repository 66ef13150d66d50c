"""Who mints the nodes' bootstrap tokens: a program on every apiserver VM, narrowed by RBAC and by admission.

Every bootstrap token expires (its Secret's ``expiration``: the apiserver's bootstrap authenticator refuses a
token past it, and the controller-manager's tokencleaner deletes its Secret). The cluster autoscaler adds nodes
at any hour, so the token nodes read from Key Vault at boot (``secret_names.NODE_BOOTSTRAP_TOKEN``) is replaced
before it expires, from inside the cluster: ``machine/control_plane/token_minter.py``, one unit on every
apiserver, mints a token of the nodes' group once the one in Key Vault is ``PERIOD`` old, valid for ``LIFETIME``,
and writes it to that one Key Vault secret. The copies agree through a Lease of their own (``LEASE``).

Why these figures: a node fetches the token at boot and sends its CSR with it a minute or so later; a token is
in Key Vault for ``PERIOD`` and stays valid ``LIFETIME - PERIOD`` after it is replaced, so a node that read it
just before still joins, and a minter that stops leaves ``LIFETIME - PERIOD`` (12 hours) before a new node
cannot join (docs/runbooks/bootstrap-token-minter.md). A stolen token is good for at most a day, and even then
buys no certificate without Azure's attested document (infra/control_plane/csr_approval.py).

Its rights, each as narrow as the API lets it be:

- Kubernetes: its own client certificate (CN ``pki.TOKEN_MINTER_USER``, in no group); RBAC (``minter_rbac``):
  create Secrets in kube-system, create Leases there, and get/update its own Lease by name. RBAC cannot narrow a
  create by type or name, so an admission policy (``minter_policy``) refuses any Secret of it that is not a
  bootstrap token of the nodes' group for authentication only, with an ``expiration`` at most ``LIFETIME`` (and a
  clock's skew) after its creation, and any Lease but its own. No read of any Secret, no delete.
- Azure: the apiserver's identity may write the one Key Vault secret nodes read (components/control_plane.py).
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import machine
from infra.boot import systemd
from infra.boot.cloudinit import CloudConfig
from infra.boot.secret_names import NODE_BOOTSTRAP_TOKEN
from infra.boot.secrets import FETCH_UNIT, IMDS_TOKEN_SCRIPT, KEY_VAULT_API_VERSION
from infra.config import naming
from infra.config.cluster_config import ClusterConfig
from infra.control_plane import paths, pki
from infra.control_plane.cluster_objects import (
    BOOTSTRAP_TOKEN_NAMESPACE,
    BOOTSTRAP_TOKEN_TYPE,
    RBAC,
    TOKEN_ID_LENGTH,
    TOKEN_SECRET_LENGTH,
    bootstrap_token_fixed_data,
)
from infra.facts.endpoints import LOCAL_APISERVER

SCRIPT = "/usr/local/sbin/supercluster-token-minter"
CONFIG = f"{paths.KUBERNETES_DIR}/token-minter.json"
UNIT = "supercluster-token-minter.service"

HOUR = 3600
LIFETIME_SECONDS = 24 * HOUR
PERIOD_SECONDS = 12 * HOUR
# How often each copy looks at its Lease (one GET a minute from each apiserver), and how long a claim holds
# before another copy may take over from a copy that died while minting.
CHECK_SECONDS = 60
CLAIM_SECONDS = 120
# What the admission policy allows beyond LIFETIME between a token's creation and its expiration: the minter's
# clock against the apiserver's (both VMs keep Azure's time; a minute is far more than they drift).
CLOCK_SKEW_SECONDS = 300

LEASE = "supercluster-bootstrap-token-minter"
MINTED_ANNOTATION = "supercluster.io/bootstrap-token-minted"
TOKEN_ID_ANNOTATION = "supercluster.io/bootstrap-token-id"
# On every token it mints, so an operator lists them (docs/runbooks/bootstrap-token-minter.md).
MINTED_LABEL = "supercluster.io/minted-by"
MINTED_BY = "token-minter"
MINTER_ROLE = "supercluster:bootstrap-token-minter"
MINTER_POLICY = "supercluster-bootstrap-token-minter"
COORDINATION = "coordination.k8s.io"


def first_token_expiration(now: datetime.datetime) -> str:
    """The first token's ``expiration`` (RFC 3339, as the apiserver reads it), which the program declares for the
    nodes that boot before the minter's first token; the minter replaces it in Key Vault at once."""
    return (now + datetime.timedelta(seconds=LIFETIME_SECONDS)).astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def minter_config(config: ClusterConfig) -> str:
    """The program's settings: the VM's own apiserver and its credential, the token it mints, its Lease, and the
    one Key Vault secret it writes. No secret."""
    document = {
        "server": LOCAL_APISERVER,
        "ca_cert": pki.cert_path(pki.CLUSTER_CA),
        "cert": pki.cert_path(pki.TOKEN_MINTER),
        "key": pki.key_path(pki.TOKEN_MINTER),
        "namespace": BOOTSTRAP_TOKEN_NAMESPACE,
        "token_type": BOOTSTRAP_TOKEN_TYPE,
        "token_data": bootstrap_token_fixed_data(),
        "token_lengths": [TOKEN_ID_LENGTH, TOKEN_SECRET_LENGTH],
        "labels": {MINTED_LABEL: MINTED_BY},
        "lifetime_seconds": LIFETIME_SECONDS,
        "period_seconds": PERIOD_SECONDS,
        "check_seconds": CHECK_SECONDS,
        "claim_seconds": CLAIM_SECONDS,
        "lease": LEASE,
        "minted_annotation": MINTED_ANNOTATION,
        "token_id_annotation": TOKEN_ID_ANNOTATION,
        "vault": f"https://{naming.key_vault(config.cluster_name)}.vault.azure.net",
        "vault_api_version": KEY_VAULT_API_VERSION,
        "vault_secret": NODE_BOOTSTRAP_TOKEN,
        "vault_ca_file": None,  # the machine's root store
        "token_command": [IMDS_TOKEN_SCRIPT, "https://vault.azure.net"],
    }
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def add_minter_unit(cloud: CloudConfig, config: ClusterConfig) -> None:
    """The program, its settings and its long-running unit, started once its credential is fetched; it retries
    every ``CHECK_SECONDS`` until the local apiserver answers."""
    # Compressed: the apiservers' customData is near Azure's limit (infra/boot/cloudinit.py).
    cloud.add(SCRIPT, machine.source("control_plane/token_minter.py"), permissions="0755", compressed=True)
    cloud.add(CONFIG, minter_config(config), permissions="0644", compressed=True)
    cloud.add(
        f"/etc/systemd/system/{UNIT}",
        systemd.unit(
            "Mint the nodes' bootstrap tokens into Key Vault",
            [SCRIPT, CONFIG],
            after=["network-online.target", FETCH_UNIT, paths.APISERVER_UNIT],
            wants=["network-online.target", FETCH_UNIT],
            service={
                "Restart": "always",
                "RestartSec": "10",
                # It reads its files and talks HTTPS; it writes nothing.
                "NoNewPrivileges": "yes",
                "ProtectSystem": "strict",
                "ProtectHome": "yes",
                "PrivateTmp": "yes",
            },
        ),
        permissions="0644",
    )


def minter_rbac() -> list[dict[str, Any]]:
    """Create Secrets and Leases in kube-system, get and update its own Lease; bound to its user alone."""
    role = {
        "apiVersion": f"{RBAC}/v1",
        "kind": "Role",
        "metadata": {"name": MINTER_ROLE, "namespace": BOOTSTRAP_TOKEN_NAMESPACE},
        "rules": [
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
            {"apiGroups": [COORDINATION], "resources": ["leases"], "verbs": ["create"]},
            {
                "apiGroups": [COORDINATION],
                "resources": ["leases"],
                "resourceNames": [LEASE],
                "verbs": ["get", "update"],
            },
        ],
    }
    binding = {
        "apiVersion": f"{RBAC}/v1",
        "kind": "RoleBinding",
        "metadata": {"name": MINTER_ROLE, "namespace": BOOTSTRAP_TOKEN_NAMESPACE},
        "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": MINTER_ROLE},
        "subjects": [{"apiGroup": RBAC, "kind": "User", "name": pki.TOKEN_MINTER_USER}],
    }
    return [role, binding]


def minted_token_keys() -> list[str]:
    """Every key of a minted token's data: the fixed ones, its id and secret, and its expiration."""
    return sorted([*bootstrap_token_fixed_data(), "token-id", "token-secret", "expiration"])


def _data(key: str) -> str:
    return f"string(object.data['{key}'])"


def _having(*keys: str) -> str:
    """Guards an expression that reads these data keys (a missing one would be an evaluation error, not a denial
    with the policy's message)."""
    return "has(object.data) && " + " && ".join(f"'{k}' in object.data" for k in keys)


def minter_policy() -> list[dict[str, Any]]:
    """What the minter may create or update, whatever RBAC allows it: a Secret only if it is a bootstrap token
    whose every key is one a token of ours has (``minted_token_keys``), of the nodes' group and no other, for
    authentication only (never signing), named for its id, expiring at most ``LIFETIME_SECONDS`` (plus
    ``CLOCK_SKEW_SECONDS``) after its creation (its ``creationTimestamp``, which the apiserver sets before
    validating admission); a Lease only if it is its own. A Secret's ``stringData`` is merged into ``data``
    before admission, which sees bytes."""
    fixed = {k: v for k, v in bootstrap_token_fixed_data().items() if k != "description"}
    allowed_keys = minted_token_keys()
    keys = "[" + ", ".join(f"'{k}'" for k in allowed_keys) + "]"
    is_secret = "request.resource.resource == 'secrets'"
    lifetime = f"duration('{LIFETIME_SECONDS + CLOCK_SKEW_SECONDS}s')"
    created = "timestamp(string(object.metadata.creationTimestamp))"
    secret_checks = [
        (
            f"object.type == '{BOOTSTRAP_TOKEN_TYPE}'",
            f"the token minter creates only Secrets of type {BOOTSTRAP_TOKEN_TYPE}",
        ),
        (
            f"{_having('expiration', 'token-id')} && object.data.all(k, k in {keys})",
            f"a minted token has exactly the keys {', '.join(allowed_keys)}",
        ),
        (
            f"{_having(*sorted(fixed))} && " + " && ".join(f"{_data(k)} == '{v}'" for k, v in sorted(fixed.items())),
            "a minted token authenticates (never signs) and only as the nodes' group " + fixed["auth-extra-groups"],
        ),
        (
            f"{_having('token-id')} && object.metadata.name == 'bootstrap-token-' + {_data('token-id')}",
            "a minted token's Secret is named bootstrap-token-<token-id>",
        ),
        (
            f"{_having('expiration')} && timestamp({_data('expiration')}) - {created} <= {lifetime}",
            f"a minted token expires at most {LIFETIME_SECONDS} s after its creation",
        ),
    ]
    validations = [
        {"expression": f"!({is_secret}) || ({expression})", "message": message} for expression, message in secret_checks
    ] + [
        {
            "expression": f"request.resource.resource != 'leases' || object.metadata.name == '{LEASE}'",
            "message": f"the token minter's only Lease is {LEASE}",
        }
    ]
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": MINTER_POLICY},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["secrets"],
                        },
                        {
                            "apiGroups": [COORDINATION],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["leases"],
                        },
                    ]
                },
                "matchConditions": [
                    {
                        "name": "token-minter-only",
                        "expression": f"request.userInfo.username == '{pki.TOKEN_MINTER_USER}'",
                    }
                ],
                "validations": validations,
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": MINTER_POLICY},
            "spec": {"policyName": MINTER_POLICY, "validationActions": ["Deny"]},
        },
    ]
