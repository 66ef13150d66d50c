"""docs/cis-benchmark.md's CIS control-plane files table (section 1.1), checked against the cloud-init a prod
apiserver, a prod etcd member and every prod node pool receive."""

from __future__ import annotations

import fnmatch
import functools
import json
import re

import pytest

from infra.boot.secrets import FETCH_SCRIPT_PATH, FETCH_UNIT
from infra.config import naming
from infra.etcd import member_machine as etcd_machine
from infra.etcd.spec import MAIN, etcd_cluster_spec
from plan.artifacts import cloud_init_entries, file_content
from tests.helpers import doc_table_rows, load_yaml
from tests.infra.addon_fixtures import cluster_for, node_cloud_inits
from tests.infra.control_plane_files import machines, spec

# CIS Kubernetes Benchmark v1.12, section 1.1 (kube-bench cfg/cis-1.12/master.yaml).
CHECKS = [f"1.1.{n}" for n in range(1, 22)]
ROWS = doc_table_rows("docs/cis-benchmark.md", "## CIS Kubernetes Benchmark (control-plane files)", "1.1.")


def _entries(cloud_init: str) -> dict[str, dict]:
    return cloud_init_entries(cloud_init)


@functools.cache
def apiserver() -> dict[str, dict]:
    return _entries(machines("prod")[0].cloud_init)


@functools.cache
def etcd_member() -> dict[str, dict]:
    cluster = spec("prod")
    etcd = etcd_cluster_spec(cluster, MAIN)
    return _entries(
        etcd_machine.member_cloud_init(etcd, etcd.members[0], naming.key_vault(cluster.config.cluster_name))
    )


@functools.cache
def node_pools() -> dict[str, dict[str, dict]]:
    """Every cloud-init a prod node receives (one per pool, or per shard where they differ)."""
    return {key: _entries(text) for key, text in node_cloud_inits(cluster_for("prod")).items()}


def _fetched(files: dict[str, dict]) -> list[tuple[str, str]]:
    """``[(path, mode)]`` the machine's Key Vault fetch writes."""
    return re.findall(r"^fetch \S+ (\S+) (\d+)$", file_content(files[FETCH_SCRIPT_PATH]), flags=re.MULTILINE)


def _mode_owner(entry: dict) -> tuple[str, str]:
    return entry["permissions"], entry.get("owner", "root:root")  # cloud-init writes as root:root by default


def test_table_covers_every_control_plane_file_check():
    assert list(ROWS) == CHECKS


@pytest.mark.parametrize("check", CHECKS)
def test_row_matches_the_rendered_files(check):
    claims = ROWS[check]
    assert claims, f"{check}: no rendered setting in the table"
    for claim in claims:
        where = f"{check}: {claim}"
        if match := re.fullmatch(r"(?:(etcd|node) )?(0\d{3}) (\w+:\w+) (/\S+)", claim):
            machine, mode, owner, path = match.groups()
            targets = {"etcd": [etcd_member()], "node": list(node_pools().values())}.get(machine, [apiserver()])
            for files in targets:
                assert _mode_owner(files[path]) == (mode, owner), f"{where}: {_mode_owner(files[path])}"
        elif claim.startswith("no /"):
            assert claim[3:] not in apiserver(), where
        elif match := re.fullmatch(r"fetched (0\d{3}) (/\S+)", claim):
            mode, pattern = match.groups()
            matching = [(path, m) for path, m in _fetched(apiserver()) if fnmatch.fnmatch(path, pattern)]
            assert matching and all(m == mode for _, m in matching), f"{where}: {matching}"
        elif match := re.fullmatch(r"fetched root:root (/\S+)", claim):
            directory = match[1].rstrip("/") + "/"
            # Nothing under it comes from cloud-init (whose owner could be set otherwise), and the fetch
            # runs as root: its unit names no other user.
            assert not [p for p in apiserver() if p.startswith(directory)], where
            assert [p for p, _ in _fetched(apiserver()) if p.startswith(directory)], where
            assert "User=" not in apiserver()[f"/etc/systemd/system/{FETCH_UNIT}"]["content"], where
        elif claim.startswith("etcd tool "):
            key, value = (part.strip() for part in claim.removeprefix("etcd tool ").split(":", 1))
            settings = json.loads(etcd_member()[etcd_machine.TOOL_SETTINGS_PATH]["content"])
            assert settings[key] == load_yaml(value), f"{where}: {settings[key]!r}"
        elif claim.startswith("etcd "):
            key, value = (part.strip() for part in claim.removeprefix("etcd ").split(":", 1))
            config = load_yaml(etcd_member()[etcd_machine.CONFIG_PATH]["content"])
            assert config[key] == load_yaml(value), f"{where}: {config[key]!r}"
        else:
            raise AssertionError(f"{where}: a claim this test cannot check")
