"""How long a node bootstrap token lives, when the next is minted, and the metric that says when the last was.

Shared by the minter on the apiservers (infra/control_plane/token_minting.py), which mints and publishes, and
monitoring's rules (infra/addons/monitoring/rules.py), which alert before new nodes stop joining.
"""

from __future__ import annotations

HOUR = 3600
# A token is valid this long after it is minted; the next is minted once it is PERIOD_SECONDS old, so what a
# node reads is valid for at least LIFETIME_SECONDS - PERIOD_SECONDS more.
LIFETIME_SECONDS = 24 * HOUR
PERIOD_SECONDS = 12 * HOUR
# Every minter copy publishes when the token in Key Vault was minted (its Lease's annotation), so a minter that
# stops is seen hours before new nodes stop joining.
MINTED_METRIC = "supercluster_bootstrap_token_minted_timestamp_seconds"
