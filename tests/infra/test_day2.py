"""Day-2 rules against the last deploy's outputs (infra/day2/deploy_rules.py): refused changes, and docs/day2.md's
table."""

from __future__ import annotations

import re

import pytest

from infra.assembly.desired_cluster import assemble
from infra.config.cluster_config import LOCATION_KEY, parse_config
from infra.config.errors import ConfigError
from infra.day2.deploy_rules import (
    REFUSED,
    STAGED,
    LastDeploy,
    MachineState,
    RollingUpgrade,
    apiservers_behind,
    check_kubernetes_upgrade,
    check_live_changes,
    last_deploy,
    node_kubernetes_version,
    stage,
    unfinished_upgrade,
)
from plan.runner import own_stack_name, run_program
from plan.stackfile import PROJECT_DIR, load_stack_config, namespace_values
from tests.helpers import parsed, raw_config

DOC = PROJECT_DIR / "docs" / "day2.md"

# One live-breaking value per refused key (dev's values are in Pulumi.dev.yaml).
REFUSED_CHANGES = {
    "clusterName": ["clusterName=dev2"],
    LOCATION_KEY: [f"{LOCATION_KEY}=westus3"],
    "network.serviceCidr": ["network.serviceCidr=172.21.0.0/20"],
    "network.addressSpace": ["network.addressSpace=10.128.0.0/10"],
}


def test_every_refused_key_has_a_live_breaking_example():
    assert set(REFUSED_CHANGES) == set(REFUSED)


@pytest.mark.parametrize("key", list(REFUSED_CHANGES))
def test_changes_a_live_cluster_cannot_take_are_refused(key, dev_plan):
    """Refused before anything is declared, one line naming the key, both values and the rebuild path."""
    config = load_stack_config("dev", REFUSED_CHANGES[key])
    with pytest.raises(ConfigError) as refused:
        run_program("dev", config, {own_stack_name("dev"): dev_plan.outputs})
    message = str(refused.value)
    assert "\n" not in message and refused.value.key == key
    assert "as in the last deploy: it cannot change on a live cluster" in message
    assert "build a new cluster beside this one" in message and "docs/day2.md" in message
    # The same config is fine for a first deploy: everything the program checks before declaring a resource.
    assemble(namespace_values(config), config[LOCATION_KEY], {})


def test_an_unreadable_or_absent_last_deploy_refuses_nothing():
    for outputs in (None, {}, {"cluster": "not a mapping"}, {"cluster": {"clusterName": 7}}):
        last = last_deploy(outputs)
        assert not last.exists and last.scale_sets == frozenset() and last.machines is None
        check_kubernetes_upgrade(last, parse_config(raw_config("dev"), "eastus"))
        check_live_changes(last, parse_config(raw_config("dev"), "eastus"))


def test_the_last_deploy_is_read_from_the_contract_and_the_rollout_record(dev_plan):
    last = last_deploy(dev_plan.outputs)
    assert (last.cluster_name, last.location, last.kubernetes_version) == ("dev", "eastus", "1.33.4")
    assert (last.service_cidr, last.address_space) == ("172.20.0.0/20", "10.64.0.0/10")
    assert last.scale_sets == {"gpu-s000", "cpu-s000", "platform-s000"}
    assert last.machines["apiserver"] == ()  # no apiserver VM: the scale set's model is recorded instead
    assert last.apiserver_scale_set.kubernetes_version == "1.33.4"
    assert last.node_kubernetes_version == "1.33.4"


def _on_scale_set(rolling: RollingUpgrade | None, model: str = "1.34.1") -> LastDeploy:
    """A last deploy that moved the apiserver scale set's model to ``model`` (nodes still on 1.33.4)."""
    return LastDeploy(
        cluster_name="c",
        kubernetes_version="1.34.1",
        machines={"apiserver": ()},
        apiserver_scale_set=MachineState("x", "S1", model, "1.1.0"),
        apiserver_rolling_upgrade=rolling,
        node_kubernetes_version="1.33.4",
    )


DONE = {"runningStatus": {"code": "Completed"}, "progress": {"successfulInstanceCount": 5}}


@pytest.mark.parametrize(
    ("rolling", "behind"),
    [
        (RollingUpgrade(None, (True,) * 5), None),  # no rolling upgrade ever: every instance built from the model
        (RollingUpgrade(DONE, (True,) * 5), None),
        (RollingUpgrade(DONE, (True, True, False, True, True)), "1 of 5 apiserver instances not on the latest model"),
        (
            RollingUpgrade({"runningStatus": {"code": "RollingForward"}, "progress": {"pendingInstanceCount": 3}}, ()),
            "the apiserver rolling upgrade is RollingForward (pendingInstanceCount 3)",
        ),
        (
            RollingUpgrade({"runningStatus": {"code": "Faulted"}, "progress": {"failedInstanceCount": 1}}, ()),
            "the apiserver rolling upgrade is Faulted (failedInstanceCount 1)",
        ),
        (None, "the apiserver scale set's rolling upgrade state could not be read"),
    ],
)
def test_nodes_follow_only_once_azure_has_rolled_the_apiserver_model_to_every_instance(rolling, behind):
    """The upgrade gate reads the scale set's rolling-upgrade state: nodes, NAT hosts and the autoscaler take the
    new release only once every instance runs the model that carries it, and the next minor waits for it too."""
    last = _on_scale_set(rolling)
    assert apiservers_behind(last, "1.34.1") == behind
    config = parsed(kubernetesVersion="1.34.1")
    assert node_kubernetes_version(last, config) == ("1.34.1" if behind is None else "1.33.4")
    if behind is not None:
        assert unfinished_upgrade(last) == behind
    else:
        assert unfinished_upgrade(last) == "nodes still on 1.33.4"


def test_a_scale_set_model_on_the_old_release_holds_the_nodes_back():
    last = _on_scale_set(RollingUpgrade(DONE, (True,) * 5), model="1.33.4")
    assert apiservers_behind(last, "1.34.1") == "the apiserver scale set's model is on 1.33.4, not 1.34.1"


A, B = MachineState("a", "S1", "1.33.4", "1.0.0"), MachineState("b", "S1", "1.34.1", "1.0.0")


@pytest.mark.parametrize(
    ("previous", "desired", "expected"),
    [
        (None, [B, B], [(B, False), (B, False)]),  # no record: nothing moves
        ([A, A, A], [B, B, B], [(B, True), (A, False), (A, False)]),
        ([B, A, A], [B, B, B], [(B, False), (B, True), (A, False)]),
        ([B, B, B], [B, B, B], [(B, False)] * 3),
        ([B], [B, B], [(B, False), (B, False)]),  # a new machine is created as desired
        ([A], [B, B], [(B, True), (B, False)]),
    ],
)
def test_stage_moves_the_first_machine_that_differs_and_keeps_the_rest(previous, desired, expected):
    assert [(s.state, s.moves) for s in stage(previous, desired)] == expected


def _doc_rows() -> dict[str, str]:
    """``{config key: kind}`` from docs/day2.md's table of changes (first column a `key`, second the kind)."""
    rows = re.findall(r"^\| `([^`]+)`[^|]*\| \*\*(refused|staged|safe)\*\*", DOC.read_text(), flags=re.MULTILINE)
    return dict(rows)


def test_every_refused_rule_has_a_row_in_docs():
    rows = _doc_rows()
    for key in REFUSED:
        assert rows.get(key) == "refused", f"docs/day2.md has no 'refused' row for {key}"
    for key in STAGED:
        assert rows.get(key) == "staged", f"docs/day2.md has no 'staged' row for {key}"
