"""Small builders shared by tests: a valid raw config to mutate, and config parsing shortcuts."""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

import machine as programs
from infra.cluster.cluster_spec import ClusterSpec
from infra.config import naming
from infra.config.cluster_config import ClusterConfig, NodePoolConfig, parse_config
from infra.config.errors import NAMESPACE
from infra.config.sizing import shards
from infra.node import NodeSpec
from infra.node.pool import node_spec
from plan.stack_yaml import load_file
from plan.stackfile import PROJECT_DIR

FIXTURES = PROJECT_DIR / "tests" / "fixtures"


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` on libyaml: the same safe types, several times faster on the rendered files the
    tests read by the hundred (cloud-inits, Prometheus configs)."""
    return yaml.load(text, Loader=yaml.CSafeLoader)


def raw_stack(stack: str = "dev") -> dict[str, Any]:
    """The ``supercluster:*`` values of a stack file (Pulumi.<stack>.yaml), without the namespace, as a fresh
    copy. For stack tests and prod-policy tests only: unit tests use ``raw_config``."""
    return _values(PROJECT_DIR / f"Pulumi.{stack}.yaml")


def raw_config(shape: str = "dev") -> dict[str, Any]:
    """A valid config of the tests' own to build on (tests/fixtures/<shape>.yaml: ``dev``, a small cluster;
    ``prod``, a 7,500-node one), never the stack files: a change to a stack breaks no unit test."""
    return _values(FIXTURES / f"{shape}.yaml")


def _values(path: Path) -> dict[str, Any]:
    values = load_file(path)["config"]  # read as the Pulumi CLI reads it
    prefix = f"{NAMESPACE}:"
    return copy.deepcopy({k[len(prefix) :]: v for k, v in values.items() if k.startswith(prefix)})


def parsed(shape: str = "dev", **changes: Any) -> ClusterConfig:
    raw = raw_config(shape)
    raw.update(changes)
    return parse_config(raw, "eastus")


def pool_node_spec(spec: ClusterSpec, pool: NodePoolConfig, shard: int = 0, *, host_network_pods: int = 0) -> NodeSpec:
    """What the program renders for one shard of ``pool``, with the cluster's own Key Vault and registry."""
    name = spec.config.cluster_name
    return node_spec(
        spec.config,
        spec.addresses,
        pool,
        shards(pool)[shard],
        kubernetes_version=spec.node_kubernetes_version,
        vault_name=naming.key_vault(name),
        registry_login_server=naming.container_registry_login_server(name),
        host_network_pods=host_network_pods,
    )


@contextlib.contextmanager
def loopback_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """``handler`` served on a free loopback port in a thread; yields its ``http://`` URL, stops it after."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def json_reply(handler: BaseHTTPRequestHandler, status: int, body: Any) -> None:
    """A stand-in's answer: ``body`` as JSON, with its type and length (a client reads exactly that many bytes)."""
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def require_tool(binary: str) -> str:
    """The path of a real tool a test feeds rendered files to. Outside CI a missing tool skips
    the test; in CI (CI=true, where scripts/setup.sh installs it) it fails the test."""
    import os
    import shutil

    import pytest

    path = shutil.which(binary)
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{binary} is not installed; scripts/setup.sh should have installed it")
        pytest.skip(f"{binary} is not installed (run scripts/setup.sh)")
    return path


def require_node_package(package: str) -> str:
    """``node``'s path, once the npm package the test runs is installed in .tools/ (scripts/setup.sh, from
    scripts/node-tools/package-lock.json). Missing: skipped outside CI, failed in CI, like ``require_tool``."""
    import os

    import pytest

    node = require_tool("node")
    if not (PROJECT_DIR / ".tools" / "node_modules" / package).is_dir():
        message = f"{package} is not installed in .tools/ (run scripts/setup.sh)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return node


def cluster_subnets(run) -> dict[str, tuple[Any, dict[str, Any]]]:
    """The subnets the cluster's VNets declare inline (the hub keeps separate Subnet resources):
    ``{subnet name: (its VNet's registration, the subnet's inputs)}``."""
    return {
        subnet["name"]: (vnet, subnet)
        for vnet in run.of_type("azure-native:network:VirtualNetwork")
        for subnet in vnet.inputs.get("subnets", [])
    }


def doc_table_rows(page: str, heading: str, row_prefix: str) -> dict[str, list[str]]:
    """``{check id: [`code` spans of its third column]}`` of the table under ``heading`` in the
    documentation page ``page`` (a path under the project, e.g. ``docs/cis-benchmark.md``)."""
    import re

    table = (PROJECT_DIR / page).read_text().split(heading, 1)[1]
    rows: dict[str, list[str]] = {}
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith(f"| {row_prefix}"):
            rows[cells[0]] = re.findall(r"`([^`]+)`", cells[2])
        elif rows and not line.startswith("|"):
            break
    return rows


def built_folder(script: str, timeout: float) -> Path:
    """The folder a build script under scripts/ prints last (building, or finding in its cache, what it
    builds); the test fails with the script's error output if it fails."""
    import subprocess

    import pytest

    result = subprocess.run(
        ["bash", str(PROJECT_DIR / "scripts" / script)], capture_output=True, text=True, timeout=timeout
    )
    if result.returncode != 0:
        pytest.fail(f"scripts/{script} failed:\n{result.stderr[-3000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


def monitoring_tool(binary: str) -> str:
    """``promtool`` or ``amtool`` built from their Go modules (scripts/build-monitoring-tools.sh,
    cached per machine; scripts/test.sh builds them before the suite). Outside CI a machine
    without Go skips the test; in CI it fails."""
    import os
    import shutil
    from pathlib import Path

    import pytest

    folder = os.environ.get("SUPERCLUSTER_MONITORING_TOOLS")
    if not folder:
        if shutil.which("go") is None:
            if os.environ.get("CI") == "true":
                pytest.fail("the Go toolchain is missing; promtool and amtool are built from their Go modules")
            pytest.skip("the Go toolchain is missing (promtool and amtool are built from their Go modules)")
        folder = str(built_folder("build-monitoring-tools.sh", timeout=1800))
    path = Path(folder) / binary
    assert path.is_file(), f"{path} missing"
    return str(path)


def bcrypt_hash(password: str) -> str:
    """``password``'s bcrypt hash (``$2b$``, cost 10) by the system's libcrypt (libxcrypt), as Prometheus's and
    Alertmanager's web configs take it; the deploy's comes from the random provider's ``bcryptHash``."""
    import ctypes

    libcrypt = ctypes.CDLL("libcrypt.so.1")
    libcrypt.crypt_gensalt.restype = ctypes.c_char_p
    libcrypt.crypt.restype = ctypes.c_char_p
    setting = libcrypt.crypt_gensalt(b"$2b$", 10, None, 0)
    hashed = libcrypt.crypt(password.encode(), setting)
    assert setting and hashed and hashed.startswith(b"$2b$10$"), "libcrypt made no bcrypt hash"
    return str(hashed.decode())


@contextlib.contextmanager
def recorded_stack_traces() -> Iterator[list[Any]]:
    """Every ``StackTrace`` the engine would receive with a resource while the block runs, as the mock monitor is
    sent it (``plan.mocks.RecordingMonitor``): what the SDK records, after anything the runner changes."""
    from plan import mocks

    recorded: list[Any] = []
    register = mocks.RecordingMonitor.RegisterResource

    def recording(self: mocks.RecordingMonitor, request: Any) -> Any:
        recorded.append(request.stackTrace)
        return register(self, request)

    mocks.RecordingMonitor.RegisterResource = recording  # type: ignore[method-assign]
    try:
        yield recorded
    finally:
        mocks.RecordingMonitor.RegisterResource = register  # type: ignore[method-assign]


def load_program(source: str) -> ModuleType:
    """A program of ``machine/`` (``source``, e.g. ``node/node_join.py``), imported from the file the machines
    receive, each call a fresh module (a test may patch it)."""
    spec = importlib.util.spec_from_file_location(Path(source).stem, programs.path(source))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
