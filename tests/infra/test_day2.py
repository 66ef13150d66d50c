"""Day-2 rules against the last deploy's outputs (infra/day2.py): refused changes, and docs/day2.md's table."""

from __future__ import annotations

import re

import pytest

from infra.config import LOCATION_KEY
from infra.day2 import REFUSED, STAGED, check_live_changes, last_deploy
from infra.errors import ConfigError
from infra.plan.runner import own_stack_name, run_program
from infra.plan.stackfile import PROJECT_DIR, load_stack_config

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
    run_program("dev", config, {})  # the same config is fine for a first deploy


def test_an_unreadable_or_absent_last_deploy_refuses_nothing(dev_plan):
    config = load_stack_config("dev", ["network.serviceCidr=172.21.0.0/20"])
    parsed_outputs = [None, {}, {"cluster": "not a mapping"}, {"cluster": {"clusterName": 7}}]
    for outputs in parsed_outputs:
        assert not last_deploy(outputs).exists or last_deploy(outputs).cluster_name is None
    from infra.config import parse_config
    from infra.plan.__main__ import _namespace_values
    check_live_changes(last_deploy(None), parse_config(_namespace_values(config), config[LOCATION_KEY]))


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
