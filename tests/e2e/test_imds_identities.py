"""The box's IMDS stand-in hands a machine a token only for an identity the plan attaches to that machine, as IMDS
does: each of dev's machines, running its own token helper with its own identity file, gets one; asked for any
other identity (another role's, or its own in the wrong resource group, the defect fixed in 7685585), it is
answered 400 and the helper fails. Fast: the stand-in on loopback, no box."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infra.boot.secrets import _IMDS_TOKEN_SOURCE, IDENTITY_FILE
from plan.artifacts import collect_files, recorded
from tests.e2e import imds
from tests.e2e.attestation import Attestation
from tests.e2e.plan_machines import Machine, Plan


class _AsMachine(imds.Handler):
    """The stand-in, answering every request as if from ``address`` (the machine under test)."""

    address = ""

    def machine_address(self) -> str:
        return self.address


@pytest.fixture
def stand_in(tmp_path):
    with imds.on_loopback(_AsMachine, tmp_path) as url:
        yield url, Attestation(tmp_path)


def _machines(dev_plan) -> tuple[list[Machine], dict[str, str]]:
    """A machine of each set of identities among dev's VMs and scale sets, as the box boots them, and every file the
    plan writes."""
    plan = Plan(Path("unused"), json.loads(json.dumps([recorded(r) for r in dev_plan.registrations])))
    machines = plan.vms() + plan.apiserver_instances()[:1] + [s.instance(0) for s in plan.scale_sets()]
    return list({m.identities: m for m in reversed(machines)}.values()), collect_files(dev_plan.registrations)


def _token(endpoint: str, identity_text: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """The token helper as a machine runs it, its identity file holding ``identity_text``."""
    identity = tmp_path / "identity"
    identity.write_text(identity_text)
    env = {**os.environ, "IMDS_ENDPOINT": endpoint, "IDENTITY_FILE": str(identity), "IMDS_ATTEMPTS": "1"}
    return subprocess.run(
        [sys.executable, str(_IMDS_TOKEN_SOURCE), "https://vault.azure.net"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_each_machine_gets_a_token_for_its_own_identity_and_none_for_another(dev_plan, stand_in, tmp_path):
    endpoint, attestation = stand_in
    machines, files = _machines(dev_plan)
    identity_files = {m.resource: files[f"{m.resource}{IDENTITY_FILE}"] for m in machines}
    assert len(set(identity_files.values())) >= 4, "etcd, events etcd, apiservers, nodes, NAT hosts: each its own"
    for index, machine in enumerate(machines):
        assert machine.identities, machine.resource
        attestation.carry(machine)
        _AsMachine.address = machine.ip
        own = _token(endpoint, identity_files[machine.resource], tmp_path)
        assert own.returncode == 0 and own.stdout.strip() == imds.ACCESS_TOKEN, (machine.resource, own.stderr)
        # The next machine's role identity that this one does not carry (platform nodes also carry the autoscaler's).
        names = {identity.rsplit("/", 1)[1] for identity in machine.identities}
        other = next(
            identity_files[m.resource]
            for m in machines[index + 1 :] + machines[:index]
            if identity_files[m.resource].strip().rsplit("/", 1)[1] not in names
        )
        refused = _token(endpoint, other, tmp_path)
        assert refused.returncode == 1 and "HTTP Error 400" in refused.stderr, (machine.resource, other)
    # The identity named in the machine's own resource group (a node scale set's is the node resource group):
    node = next(m for m in machines if "-nodes-rg/" in m.azure_id)
    _AsMachine.address = node.ip
    group = node.azure_id.split("/")[4]
    wrong_group = identity_files[node.resource].replace("/resourceGroups/dev-rg/", f"/resourceGroups/{group}/")
    assert wrong_group != identity_files[node.resource]
    assert _token(endpoint, wrong_group, tmp_path).returncode == 1


def test_a_machine_the_box_did_not_give_an_identity_gets_no_token(dev_plan, stand_in, tmp_path):
    endpoint, _ = stand_in
    machines, files = _machines(dev_plan)
    _AsMachine.address = "10.255.255.1"  # no machine of the plan
    assert _token(endpoint, files[f"{machines[0].resource}{IDENTITY_FILE}"], tmp_path).returncode == 1
