"""The config reference and Pulumi.yaml's config section are generated from the validator's reads,
and fail here when either drifts from it."""

from __future__ import annotations

import pytest

from infra.addons.settings import DESCRIPTIONS as ADDON_DESCRIPTIONS
from infra.config.cluster_config import parse_config
from infra.config.errors import MISSING
from infra.config.schema import recording
from plan import config_docs
from plan.stack_yaml import load_file
from tests.helpers import raw_config


@pytest.fixture(scope="module")
def reads():
    return config_docs.config_reads()


def test_the_reference_in_docs_is_what_the_validator_reads(reads):
    current = config_docs.REFERENCE.read_text()
    assert current == config_docs.render_reference(current, reads), (
        "docs/config-reference.md is stale: run python -m plan.config_docs --write"
    )


def test_pulumi_yaml_config_is_what_the_validator_reads(reads):
    current = config_docs.PROJECT_FILE.read_text()
    assert current == config_docs.render_project(current, reads), (
        "Pulumi.yaml is stale: run python -m plan.config_docs --write"
    )


def test_the_generated_pulumi_yaml_still_reads_as_a_project(reads):
    project = load_file(config_docs.PROJECT_FILE)
    assert project["name"] == "supercluster" and project["runtime"]["name"] == "python"
    assert project["config"]["addons"]["default"] == {} and project["config"]["nodePools"]["type"] == "array"


def test_every_key_has_a_description_and_every_description_a_key(reads):
    assert [r.path for r in reads if not r.description] == []
    paths = {r.path for r in reads}
    assert sorted(set(ADDON_DESCRIPTIONS) - paths) == [], "descriptions of settings no add-on reads"


def test_a_drifted_reference_is_caught(reads):
    current = config_docs.REFERENCE.read_text()
    tampered = current.replace("a whole number from 1 to 16", "a whole number from 1 to 32", 1)
    assert tampered != current and tampered != config_docs.render_reference(tampered, reads)
    assert config_docs.render_reference(tampered, reads) == current


def test_a_read_records_type_bounds_and_default():
    with recording() as reads:
        parse_config(raw_config("dev"), "eastus")
    by_path = {r.path: r for r in reads}
    assert (
        by_path["etcd.members"].kind == "integer" and by_path["etcd.members"].accepted == "a whole number from 1 to 7"
    )
    assert by_path["nodePools[].infiniband"].default is False
    assert by_path["clusterName"].default is MISSING
    assert by_path["nodePools[].taints[].effect"].accepted == "one of NoSchedule, PreferNoSchedule, NoExecute"


def test_the_check_mode_exits_1_naming_a_stale_file(monkeypatch, capsys, tmp_path):
    (tmp_path / "Pulumi.yaml").write_text(config_docs.PROJECT_FILE.read_text())
    stale = tmp_path / "config-reference.md"
    stale.write_text(config_docs.REFERENCE.read_text().replace("| `clusterName` |", "| `clusterNam` |"))
    monkeypatch.setattr(config_docs, "REFERENCE", stale)
    monkeypatch.setattr(config_docs, "PROJECT_FILE", tmp_path / "Pulumi.yaml")
    monkeypatch.setattr(config_docs, "PROJECT_DIR", tmp_path)
    assert config_docs.main([]) == 1
    assert "config-reference.md is out of date" in capsys.readouterr().err
