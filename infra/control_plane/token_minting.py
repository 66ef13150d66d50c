"""The nodes' bootstrap tokens, and who mints them: a program on every apiserver VM, narrowed by RBAC and admission.

Every bootstrap token expires (its Secret's ``expiration``: the apiserver's bootstrap authenticator refuses a
token past it, and the controller-manager's tokencleaner deletes its Secret). The cluster autoscaler adds nodes
at any hour, so the token nodes read from Key Vault at boot (``secret_names.NODE_BOOTSTRAP_TOKEN``) is replaced
before it expires, from inside the cluster: ``machine/control_plane/token_minter.py``, one unit on every
apiserver, mints a token of the nodes' group once the one in Key Vault is ``PERIOD_SECONDS`` old, valid for
``LIFETIME_SECONDS``, and writes it to that one Key Vault secret.

Why these figures: a node fetches the token at boot and sends its CSR with it a minute or so later; a token is
in Key Vault for ``PERIOD_SECONDS`` and stays valid ``LIFETIME_SECONDS - PERIOD_SECONDS`` after it is replaced,
so a node that read it just before still joins, and a minter that stops leaves that long (12 hours) before a new
node cannot join (docs/runbooks/bootstrap-token-minter.md). A stolen token is good for at most a day, and even
then buys no certificate without Azure's attested document (infra/control_plane/csr_approval.py).

Which copy mints: a Lease of their own (``LEASE``) records when the token in Key Vault was minted (an annotation,
written only once Key Vault holds it) and which copy is minting now (``holderIdentity``, for ``CLAIM_SECONDS``). A
copy claims it with an update at the Lease's resourceVersion, so of copies that try at once the apiserver takes
one and answers the others 409. A claim whose holder died before it finished lapses and the next copy mints again;
a token minted but never written to Key Vault simply expires. The minter deletes nothing: tokencleaner removes
expired tokens, so it needs create, not delete. Every copy publishes the Lease's mint time (``minter_metrics``),
which monitoring alerts on hours before new nodes would stop joining (``BootstrapTokenMintOverdue``,
``BootstrapTokenExpiring``).

Its rights, each as narrow as the API lets it be:

- Kubernetes: its own client certificate (CN ``pki.TOKEN_MINTER_USER``, in no group); RBAC
  (``cluster_objects.token_minter_rbac``): create Secrets in kube-system, create Leases there, and get/update its
  own Lease by name. RBAC cannot narrow a create by type or name, so an admission policy
  (``admission.token_minter_policy``) refuses any Secret of it that is not a bootstrap token of the nodes' group
  for authentication only, with an ``expiration``, and any Lease but its own. No read of any Secret, no delete.
- Azure: the apiserver's identity may write the one Key Vault secret nodes read (components/control_plane.py).
"""

from __future__ import annotations

import datetime
import json

from infra.boot import systemd
from infra.boot.cloudinit import CloudConfig
from infra.boot.secret_names import NODE_BOOTSTRAP_TOKEN
from infra.boot.secrets import IMDS_TOKEN_SCRIPT, KEY_VAULT_API_VERSION, add_boot_program
from infra.config import naming
from infra.config.cluster_config import ClusterConfig
from infra.control_plane import machine_identity, paths, pki
from infra.facts import attestation, ports
from infra.facts.bootstrap_token import LIFETIME_SECONDS as LIFETIME_SECONDS  # the minter's, named here too
from infra.facts.bootstrap_token import MINTED_METRIC as MINTED_METRIC
from infra.facts.bootstrap_token import PERIOD_SECONDS as PERIOD_SECONDS
from infra.facts.endpoints import LOCAL_APISERVER

SCRIPT = "/usr/local/sbin/supercluster-token-minter"
CONFIG = f"{paths.KUBERNETES_DIR}/token-minter.json"
UNIT = "supercluster-token-minter.service"

# How often each copy looks at its Lease (one GET a minute from each apiserver), and how long a claim holds
# before another copy may take over from a copy that died while minting.
CHECK_SECONDS = 60
CLAIM_SECONDS = 120

LEASE = "supercluster-bootstrap-token-minter"
MINTED_ANNOTATION = "supercluster.io/bootstrap-token-minted"
TOKEN_ID_ANNOTATION = "supercluster.io/bootstrap-token-id"
# On every token it mints, so an operator lists them (docs/runbooks/bootstrap-token-minter.md).
MINTED_LABEL = "supercluster.io/minted-by"
MINTED_BY = "token-minter"

# What makes a token of ours (kubernetes.io "Authenticating with Bootstrap Tokens"): a Secret of this type, in
# this namespace, named for its id; the token is [a-z0-9]{6}.[a-z0-9]{16}.
BOOTSTRAP_TOKEN_NAMESPACE = "kube-system"
BOOTSTRAP_TOKEN_TYPE = "bootstrap.kubernetes.io/token"
TOKEN_ID_LENGTH = 6
TOKEN_SECRET_LENGTH = 16
TOKEN_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


def bootstrap_token_name(token_id: str) -> str:
    return f"bootstrap-token-{token_id}"


def bootstrap_token_fixed_data() -> dict[str, str]:
    """The keys every bootstrap token of ours has besides its id, secret and expiration: it authenticates (it
    never signs a ConfigMap: no ``usage-bootstrap-signing``) and adds the nodes' group alone."""
    return {
        "description": "supercluster node join; minted by the token minter (infra/control_plane/token_minting.py)",
        "usage-bootstrap-authentication": "true",
        "auth-extra-groups": attestation.BOOTSTRAP_GROUP,
    }


def bootstrap_token_data(token_id: str, token_secret: str, expiration: str) -> dict[str, str]:
    """``stringData`` of the Secret that makes ``<id>.<secret>`` a valid bootstrap token until ``expiration``
    (RFC 3339; the apiserver refuses the token after it, and tokencleaner deletes the Secret). Holds the token:
    build it only inside ``Output.apply`` and keep it secret."""
    return {
        **bootstrap_token_fixed_data(),
        "token-id": token_id,
        "token-secret": token_secret,
        "expiration": expiration,
    }


def minted_token_keys() -> list[str]:
    """Every key of a minted token's data: the fixed ones, its id and secret, and its expiration."""
    return sorted([*bootstrap_token_fixed_data(), "token-id", "token-secret", "expiration"])


def first_token_expiration(now: datetime.datetime) -> str:
    """The first token's ``expiration`` (RFC 3339, as the apiserver reads it), which the program declares for the
    nodes that boot before the minter's first token; the minter replaces it in Key Vault at once."""
    return (now + datetime.timedelta(seconds=LIFETIME_SECONDS)).astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def minter_metrics() -> dict[str, str | int]:
    """Where every copy serves ``MINTED_METRIC``: plain HTTP on its machine's own address (never a wildcard), read
    from the identity unit's file, on a port the NSG opens to the monitoring pools only."""
    return {
        "port": ports.TOKEN_MINTER_METRICS,
        "metric": MINTED_METRIC,
        "address_file": machine_identity.ENVIRONMENT_FILE,
        "address_variable": machine_identity.ADDRESS_VARIABLE,
    }


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
        "token_alphabet": TOKEN_ALPHABET,
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
        "metrics": minter_metrics(),
    }
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def add_minter_unit(cloud: CloudConfig, config: ClusterConfig) -> None:
    """The program, its settings and its long-running unit, started once its credential is fetched; it retries
    every ``CHECK_SECONDS`` until the local apiserver answers."""
    add_boot_program(
        cloud,
        unit=UNIT,
        description="Mint the nodes' bootstrap tokens into Key Vault",
        script=SCRIPT,
        source="control_plane/token_minter.py",
        config=CONFIG,
        settings=minter_config(config),
        after=(paths.APISERVER_UNIT,),
        service={
            "Restart": "always",
            "RestartSec": "10",
            # It reads its files and talks HTTPS; it writes nothing.
            **systemd.NETWORK_CLIENT_SANDBOX,
        },
        compress_program=True,
        compress_settings=True,
    )
