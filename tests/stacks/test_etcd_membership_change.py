"""An etcd cluster grows or shrinks by one member per deploy, checked against the last deploy's outputs.

The real-etcd side of a growth (``member add`` on the new member's first boot, a restore after
it) is tests/infra/test_etcd_day2_real.py; this is the program refusing the deploys that would
skip a step.
"""

from __future__ import annotations

import pytest

from infra.config.cluster_config import parse_config
from infra.config.errors import ConfigError
from infra.etcd.membership_change import CLIENT_URL_OUTPUTS, check_member_changes, previous_members
from infra.etcd.spec import EVENTS, MAIN
from plan.__main__ import EXIT_BAD_INPUT, main
from plan.artifacts import plan_files, write_plan
from tests.helpers import raw_stack


def outputs(main_members: int | None, events_members: int | None = 3) -> dict:
    urls = {MAIN: main_members, EVENTS: events_members}
    return {
        name: [f"https://10.0.0.{i}:2379" for i in range(urls[role])]
        for role, name in CLIENT_URL_OUTPUTS.items()
        if urls[role] is not None
    }


def config_with(members: int, events_members: int = 3):
    raw = raw_stack("prod")
    raw["etcd"]["members"] = members
    raw["eventsEtcd"]["members"] = events_members
    return parse_config(raw, "eastus")


def test_the_last_deploys_member_counts_are_its_client_url_outputs():
    assert previous_members({}) == {}  # the first deploy
    assert previous_members(outputs(3, 5)) == {MAIN: 3, EVENTS: 5}
    assert previous_members({"etcdClientUrls": None}) == {}


@pytest.mark.parametrize(
    "before,after,refused",
    [
        (None, 3, None),  # first deploy, odd
        (None, 4, "an odd number of members"),  # first deploy: an even count is no step
        (3, 3, None),
        (3, 4, None),  # growing: the step
        (4, 5, None),
        (3, 5, "at most one member more or fewer than the last deploy's 3 (deploy 4 first"),
        (5, 3, "at most one member more or fewer than the last deploy's 5 (deploy 4 first"),
        (5, 4, None),  # shrinking: the step
        (4, 4, "an odd number of members"),  # an even count is not a place to stay
    ],
)
def test_members_move_by_one_per_deploy_and_stay_odd(before, after, refused):
    config = config_with(after)
    previous = outputs(before)
    if refused is None:
        check_member_changes(previous, config)
        return
    with pytest.raises(ConfigError) as caught:
        check_member_changes(previous, config)
    assert caught.value.key == "etcd.members" and caught.value.value == after
    assert refused in str(caught.value) and "docs/runbooks/etcd-rolling-change.md" in str(caught.value)


def test_the_events_cluster_is_checked_too():
    with pytest.raises(ConfigError) as caught:
        check_member_changes(outputs(5, 3), config_with(5, events_members=5))
    assert caught.value.key == "eventsEtcd.members"


@pytest.mark.slow  # a sequence of whole-program runs (seconds)
def test_the_plan_refuses_growing_by_two_in_one_line_and_accepts_one_step(dev_plan, tmp_path, capsys):
    """dev runs one member; its last deploy is dev_plan's outputs."""
    old = tmp_path / "old"
    write_plan(old, plan_files(dev_plan.registrations, dev_plan.outputs, ""))
    assert len(dev_plan.outputs[CLIENT_URL_OUTPUTS[MAIN]]) == 1
    refused = tmp_path / "refused"
    code = main(["--stack", "dev", "--out", str(refused), "--diff", str(old), "--config", "etcd.members=3"])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT and err.count("\n") == 1, err
    assert err.startswith("error: invalid config supercluster:etcd.members = 3: expected at most one member")
    assert not refused.exists()
    stepped = tmp_path / "stepped"
    assert (
        main(["--stack", "dev", "--out", str(stepped), "--diff", str(old), "--config", "etcd.members=2"])
        != EXIT_BAD_INPUT
    ), capsys.readouterr().err
    assert "etcd.members" not in capsys.readouterr().err
