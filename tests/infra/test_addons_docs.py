"""Every add-on setting the code accepts is documented in the config reference (docs/config-reference.md,
generated from the validator) and every add-on in Pulumi.yaml."""

from __future__ import annotations

import re

import pytest

from infra.addons import CONFIG_KEY, MODULES
from infra.config.errors import ConfigError
from plan.stackfile import PROJECT_DIR
from tests.helpers import parsed

README = (PROJECT_DIR / "docs" / "config-reference.md").read_text()
PROJECT = (PROJECT_DIR / "Pulumi.yaml").read_text()


def accepted_settings(attr: str) -> list[str]:
    """The settings an add-on reads, as its own strict parser lists them for an unknown key."""
    with pytest.raises(ConfigError) as caught:
        MODULES[attr].parse({"~probe": 1}, parsed("dev"))
    listed = re.search(r"this object accepts: (.*)\)$", caught.value.accepted)
    assert listed, caught.value.accepted
    return [] if listed[1] == "no keys" else listed[1].split(", ")


@pytest.mark.parametrize("attr", MODULES)
def test_every_setting_is_documented(attr):
    key = CONFIG_KEY[attr]
    for setting in accepted_settings(attr):
        assert re.search(rf"`addons\.{key}\.[^`]*\b{setting}\b|`addons\.{key}\.[^`]*`[^|]*`\.{setting}`", README), (
            f"the config reference lacks addons.{key}.{setting}"
        )
    assert f"`addons.{key}`" in README and key in PROJECT
