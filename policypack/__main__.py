"""Entry point the Pulumi CLI runs for ``--policy-pack policypack``: serves ``policypack.rules.POLICIES``.

``PolicyPack`` starts the analyzer's gRPC server and never returns, so nothing else may construct it."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: infra/ and policypack/

from pulumi_policy import PolicyPack

from policypack.rules import PACK_NAME, POLICIES

PolicyPack(name=PACK_NAME, policies=POLICIES)
