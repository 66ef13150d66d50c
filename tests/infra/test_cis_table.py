"""docs/security.md's CIS control-plane table is checked against the files the apiserver VMs actually receive."""

from __future__ import annotations

import pytest
import yaml

from infra.control_plane import paths
from tests.helpers import readme_table_rows
from tests.infra.control_plane_files import component_flags, files, machines

# CIS Kubernetes Benchmark v1.12, sections 1.2-1.4 (kube-bench cfg/cis-1.12/master.yaml).
CHECKS = [f"1.2.{n}" for n in range(1, 31)] + [f"1.3.{n}" for n in range(1, 8)] + ["1.4.1", "1.4.2"]
UNITS = {"1.2": paths.APISERVER_UNIT, "1.3": paths.CONTROLLER_MANAGER_UNIT, "1.4": paths.SCHEDULER_UNIT}


ROWS = readme_table_rows("### CIS Kubernetes Benchmark (control plane)\n", "1.", "docs/security.md")


def test_table_covers_every_control_plane_check():
    assert list(ROWS) == CHECKS


@pytest.mark.parametrize("check", CHECKS)
def test_row_matches_rendered_files(check):
    machine = machines("prod")[0]
    flags = component_flags(machine, UNITS[check.rsplit(".", 1)[0]])
    claims = ROWS[check]
    assert claims, f"{check}: no rendered setting in the table"
    for claim in claims:
        if claim.startswith("no --"):
            assert claim[5:] not in flags, f"{check}: --{claim[5:]} is set"
        elif claim.startswith("--"):
            key, sep, value = claim[2:].partition("=")
            assert key in flags, f"{check}: --{key} is not set"
            if sep:
                assert flags[key] == value, f"{check}: --{key}={flags[key]}, docs/security.md says {value}"
        else:
            key, value = (part.strip() for part in claim.split(":", 1))
            config = yaml.safe_load(files(machine)[flags["config"]])
            assert config[key] == yaml.safe_load(value), f"{check}: {key} is {config[key]}"
