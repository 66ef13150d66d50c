"""The CIS worker-node table of docs/cis-benchmark.md is checked against the cloud-init every prod node pool
receives."""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import subprocess
import sys
import threading

import pytest

import machine
from infra.boot.cloudinit import render
from infra.boot.secrets import FETCH_SCRIPT_PATH
from infra.node import kube_proxy, kubelet, node_cloud_config
from plan.artifacts import file_content
from tests.helpers import doc_table_rows, json_reply, load_yaml, pool_node_spec
from tests.infra.control_plane_files import spec, unit_flags

# CIS Kubernetes Benchmark v1.12, sections 4.1, 4.2 and 4.3 (kube-bench cfg/cis-1.12/node.yaml).
CHECKS = [f"4.1.{n}" for n in range(1, 11)] + [f"4.2.{n}" for n in range(1, 15)] + ["4.3.1"]
# The kernel values kubelet checks when protectKernelDefaults is on (kubernetes pkg/kubelet/cm
# container_manager_linux.go setupKernelTunables, via pkg/util/sysctl); written out here, not imported.
KUBELET_KERNEL_EXPECTATIONS = {
    "vm.overcommit_memory": "1",
    "vm.panic_on_oom": "0",
    "kernel.panic": "10",
    "kernel.panic_on_oops": "1",
    "kernel.keys.root_maxkeys": "1000000",
    "kernel.keys.root_maxbytes": "25000000",
}


ROWS = doc_table_rows("docs/cis-benchmark.md", "## CIS Kubernetes Benchmark (worker nodes)", "4.")


@functools.cache
def pools() -> dict[str, dict[str, dict]]:
    """``{pool: {path on the node: write_files entry}}`` for every prod pool."""
    cluster = spec("prod")
    rendered = {}
    for pool in cluster.config.node_pools:
        node = pool_node_spec(cluster, pool)  # the CIS rows read files maxPods does not change
        document = load_yaml(render(node_cloud_config(node)))
        rendered[pool.name] = {entry["path"]: entry for entry in document["write_files"]}
    return rendered


def _lookup(document: dict, dotted: str):
    value = document
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(dotted)
        value = value[part]
    return value


def test_table_covers_every_worker_check():
    assert list(ROWS) == CHECKS


@pytest.mark.parametrize("check", CHECKS)
def test_row_matches_every_pools_rendered_files(check):
    claims = ROWS[check]
    assert claims, f"{check}: no rendered setting in the table"
    for pool, files in pools().items():
        config = load_yaml(files[kubelet.CONFIG_PATH]["content"])
        proxy_config = load_yaml(files[kube_proxy.CONFIG_PATH]["content"])
        flags = unit_flags(files[f"/etc/systemd/system/{kubelet.UNIT}"]["content"])
        fetched = re.findall(r"^fetch \S+ (\S+) (\d+)$", file_content(files[FETCH_SCRIPT_PATH]), flags=re.MULTILINE)
        for claim in claims:
            where = f"{check} ({pool}): {claim}"
            if claim.startswith("no --"):
                assert claim[5:] not in flags, where
            elif claim.startswith("--"):
                key, _, value = claim[2:].partition("=")
                assert flags.get(key) == value, f"{where}: --{key}={flags.get(key)}"
            elif claim.startswith("kube-proxy "):
                key, value = (part.strip() for part in claim.removeprefix("kube-proxy ").split(":", 1))
                assert _lookup(proxy_config, key) == load_yaml(value), f"{where}: {_lookup(proxy_config, key)!r}"
            elif claim.startswith("no "):
                with pytest.raises(KeyError):
                    _lookup(config, claim[3:])
            elif match := re.fullmatch(r"(0\d{3}) (\w+:\w+) (/\S+)", claim):
                mode, owner, path = match.groups()
                entry = files[path]
                assert (entry["permissions"], entry["owner"]) == (mode, owner), f"{where}: {entry['permissions']}"
            elif match := re.fullmatch(r"fetched (0\d{3}) (/\S+)", claim):
                mode, path = match.groups()
                assert (path, mode) in fetched, where
            else:
                key, value = (part.strip() for part in claim.split(":", 1))
                assert _lookup(config, key) == load_yaml(value), f"{where}: {_lookup(config, key)!r}"


def test_protect_kernel_defaults_agrees_with_every_sysctl_file_a_node_gets():
    """kubelet exits at start when a checked kernel value differs; files apply in name order, the last wins."""
    for pool, files in pools().items():
        assert load_yaml(files[kubelet.CONFIG_PATH]["content"])["protectKernelDefaults"] is True
        applied = {}
        for path in sorted(p for p in files if p.startswith("/etc/sysctl.d/")):
            for line in files[path]["content"].splitlines():
                if "=" in line and not line.lstrip().startswith("#"):
                    key, value = (part.strip() for part in line.split("=", 1))
                    applied[key] = value
        assert {key: applied.get(key) for key in KUBELET_KERNEL_EXPECTATIONS} == KUBELET_KERNEL_EXPECTATIONS, pool


def test_the_provider_id_drop_in_is_written_readable_by_root_only(tmp_path):
    """The drop-in the kubelet reads as config is written at boot by the real script, against a fake IMDS."""
    compute = {
        "subscriptionId": "sub",
        "resourceGroupName": "prod-rg",
        "name": "prod-h100a-s000_7",
        "vmScaleSetName": "prod-h100a-s000",
    }

    class Imds(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            json_reply(self, 200, compute)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Imds)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        script = tmp_path / "provider-id.py"
        script.write_text(machine.source("node/provider_id.py"))
        drop_in = tmp_path / "kubelet.conf.d" / "10-provider-id.conf"
        subprocess.run(
            [sys.executable, str(script), str(drop_in)],
            check=True,
            timeout=30,
            env={**os.environ, "IMDS_ENDPOINT": f"http://127.0.0.1:{server.server_port}"},
        )
    finally:
        server.shutdown()
    assert oct(drop_in.stat().st_mode & 0o777) == "0o600"
    assert json.loads(drop_in.read_text())["providerID"].endswith(
        "/virtualMachineScaleSets/prod-h100a-s000/virtualMachines/7"
    )
