"""Runs the policy pack offline on a plan's resources, through the same analyzer the Pulumi CLI talks to.

``PolicyPack`` serves ``pulumi_policy``'s analyzer over gRPC and never returns; here the same analyzer
object (``_PolicyAnalyzerServicer``, what ``PolicyPack`` serves) gets the engine's own request messages
(``pulumi.runtime.proto`` ``AnalyzeRequest`` per resource, ``AnalyzeStackRequest`` for the stack), built from
the plan's recorded inputs and options. So the policies' code, the deserialisation of properties and
options, and the collection of violations are the ones a real preview runs; only the engine is missing.
What the engine alone would add: unknown values during a preview (the plan has the mocks' values)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from google.protobuf import struct_pb2
from pulumi.runtime import proto
from pulumi_policy import EnforcementLevel
from pulumi_policy.policy import _PolicyAnalyzerServicer

from policypack.rules import PACK_NAME, POLICIES


@dataclass(frozen=True)
class Violation:
    policy: str
    urn: str
    message: str


def _struct(values: dict[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(values)
    return struct


def _options(resource: dict[str, Any]) -> proto.AnalyzerResourceOptions:
    options = resource["options"]
    return proto.AnalyzerResourceOptions(
        protect=options["protect"], ignoreChanges=options["ignoreChanges"],
        deleteBeforeReplace=options["deleteBeforeReplace"], deleteBeforeReplaceDefined=True,
        aliases=options.get("aliases", []), additionalSecretOutputs=options.get("additionalSecretOutputs", []),
        parent=resource.get("parent") or "")


def analyze(resources: Iterable[dict[str, Any]]) -> list[Violation]:
    """Every violation the pack reports for these resources (``Registration.as_json`` / ``resources.json``)."""
    custom = [r for r in resources if not r["type"].startswith("supercluster:")]
    analyzer = _PolicyAnalyzerServicer(PACK_NAME, "0.0.1", POLICIES, EnforcementLevel.MANDATORY)
    diagnostics = []
    for r in custom:
        request = proto.AnalyzeRequest(type=r["type"], properties=_struct(r["inputs"]), urn=r["urn"],
                                       name=r["name"], options=_options(r))
        diagnostics += [(d, r["urn"]) for d in analyzer.Analyze(request, None).diagnostics]
    stack = proto.AnalyzeStackRequest(resources=[
        proto.AnalyzerResource(type=r["type"], properties=_struct(r["inputs"]), urn=r["urn"], name=r["name"],
                               options=_options(r), parent=r.get("parent") or "",
                               dependencies=r.get("dependencies", []))
        for r in custom])
    diagnostics += [(d, d.urn) for d in analyzer.AnalyzeStack(stack, None).diagnostics]
    return [Violation(d.policyName, urn, d.message) for d, urn in diagnostics]
