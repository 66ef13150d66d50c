"""The node-labels policy the apiserver receives keys every machine the plan boots, by the name that machine
registers under, to exactly the labels its kubelet registers with: read across the whole plan (each scale set's
computer-name prefix and NAT host's computer name, each cloud-init's ``--node-labels``, the policy object).
A machine the policy does not know could register no pool label at all; one it knows with other labels would
be refused at join. What the policy refuses, against the real apiserver:
tests/e2e/test_node_labels.py."""

from __future__ import annotations

import pytest

from infra.config.naming import COMPUTER_NAME_SUFFIX_CHARS
from infra.control_plane import admission
from infra.facts.labels import POOL_LABEL
from plan.artifacts import kubernetes_object
from tests.stacks.test_node_vocabulary import registered_nodes


@pytest.fixture(params=["dev", "prod"])
def run(request):
    return request.getfixturevalue(f"{request.param}_plan")


def policy_variables(run) -> dict[str, str]:
    (policy,) = [
        o
        for o in map(kubernetes_object, run.registrations)
        if o and o["kind"] == "ValidatingAdmissionPolicy" and o["metadata"]["name"] == admission.NODE_LABELS_POLICY
    ]
    return {v["name"]: v["expression"] for v in policy["spec"]["variables"]}


def machines_by_name(run) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]]:
    """What each scale set's and NAT host's kubelet registers with, by computer-name prefix and by computer name."""
    nodes = registered_nodes(run)
    by_prefix, by_name = {}, {}
    for registration in run.registrations:
        if registration.name not in nodes:
            continue
        labels = {k: v for k, v in nodes[registration.name][0].items() if k != "kubernetes.io/os"}
        profile = registration.inputs.get("virtualMachineProfile", {}).get("osProfile")
        if profile is not None:
            by_prefix[profile["computerNamePrefix"]] = labels
        else:
            by_name[registration.inputs["osProfile"]["computerName"]] = labels
    return by_prefix, by_name


def test_the_policy_knows_every_machine_by_its_name_and_its_kubelets_labels(run):
    by_prefix, by_name = machines_by_name(run)
    assert len(by_prefix) >= 3 and by_name, (by_prefix.keys(), by_name.keys())
    variables = policy_variables(run)
    assert variables["byPrefix"] == admission._cel_map(by_prefix)
    assert variables["byName"] == admission._cel_map(by_name)
    # Names cannot be mistaken for each other: no NAT host's name reads as a scale set's instance, and each prefix
    # is one shard of the pool its labels name.
    assert not {name[:-COMPUTER_NAME_SUFFIX_CHARS] for name in by_name} & set(by_prefix)
    assert all(prefix.startswith(f"{labels[POOL_LABEL]}-s") for prefix, labels in by_prefix.items())
