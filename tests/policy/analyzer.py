"""Runs the policy pack offline on a plan's resources, served exactly as the Pulumi CLI gets it.

``pack()`` starts ``policypack/`` the way the CLI's Python analyzer host does (the pack's ``__main__``
in the project's venv): ``pulumi_policy.PolicyPack`` serves the Analyzer gRPC service on a loopback
port and prints the port. ``analyze`` then sends it the engine's own request messages
(``pulumi.runtime.proto``: an ``AnalyzeRequest`` per resource, one ``AnalyzeStackRequest``), built from
the plan's recorded inputs and options. So the policies, the deserialisation of properties and
options, and the collection of violations are what a real preview runs; only the engine is missing,
with what it alone adds: values still unknown during a preview (the plan has the mocks' values)."""

from __future__ import annotations

import contextlib
import select
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import struct_pb2
from pulumi.runtime import proto
from pulumi.runtime.proto import analyzer_pb2_grpc

from plan.stackfile import PROJECT_DIR

PACK_DIR = PROJECT_DIR / "policypack"
START_SECONDS = 60  # the pack imports pulumi and grpc before it prints its port
CALL_SECONDS = 30


@dataclass(frozen=True)
class Violation:
    policy: str
    urn: str
    message: str


@contextlib.contextmanager
def pack() -> Iterator[analyzer_pb2_grpc.AnalyzerStub]:
    """The served pack, stopped on exit whatever happens."""
    process = subprocess.Popen(
        [sys.executable, "-u", str(PACK_DIR)], cwd=PACK_DIR, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        ready, _, _ = select.select([process.stdout], [], [], START_SECONDS)
        line = process.stdout.readline().decode().strip() if ready else ""
        if not line.isdigit():
            process.kill()
            raise RuntimeError(
                f"the policy pack printed no port within {START_SECONDS}s: {line!r} "
                f"{process.communicate(timeout=10)[1].decode()[-2000:]}"
            )
        with grpc.insecure_channel(f"127.0.0.1:{line}") as channel:
            grpc.channel_ready_future(channel).result(timeout=CALL_SECONDS)
            yield analyzer_pb2_grpc.AnalyzerStub(channel)
    finally:
        process.kill()
        process.wait(timeout=10)
        process.stdout.close()
        process.stderr.close()


def _struct(values: dict[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(values)
    return struct


def _options(resource: dict[str, Any]) -> proto.AnalyzerResourceOptions:
    options = resource["options"]
    return proto.AnalyzerResourceOptions(
        protect=options["protect"],
        ignoreChanges=options["ignoreChanges"],
        deleteBeforeReplace=options["deleteBeforeReplace"],
        deleteBeforeReplaceDefined=True,
        aliases=options.get("aliases", []),
        additionalSecretOutputs=options.get("additionalSecretOutputs", []),
        parent=resource.get("parent") or "",
    )


def analyze(stub: analyzer_pb2_grpc.AnalyzerStub, resources: Iterable[dict[str, Any]]) -> list[Violation]:
    """Every violation the pack reports for these resources (``Registration.as_json`` / ``resources.json``)."""
    custom = [r for r in resources if not r["type"].startswith("supercluster:")]
    found = []
    for r in custom:
        request = proto.AnalyzeRequest(
            type=r["type"], properties=_struct(r["inputs"]), urn=r["urn"], name=r["name"], options=_options(r)
        )
        found += [
            Violation(d.policyName, r["urn"], d.message)
            for d in stub.Analyze(request, timeout=CALL_SECONDS).diagnostics
        ]
    stack = proto.AnalyzeStackRequest(
        resources=[
            proto.AnalyzerResource(
                type=r["type"],
                properties=_struct(r["inputs"]),
                urn=r["urn"],
                name=r["name"],
                options=_options(r),
                parent=r.get("parent") or "",
                dependencies=r.get("dependencies", []),
            )
            for r in custom
        ]
    )
    found += [
        Violation(d.policyName, d.urn, d.message) for d in stub.AnalyzeStack(stack, timeout=CALL_SECONDS).diagnostics
    ]
    return found
