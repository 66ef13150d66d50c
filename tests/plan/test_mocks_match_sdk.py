"""The plan's monitor (plan.mocks.RecordingMonitor) answers the program exactly as the Pulumi SDK's own
MockMonitor (``pulumi.runtime.mocks``, what ``pulumi.runtime.set_mocks`` installs by default) does.

RecordingMonitor replaces the SDK's RegisterResource with a faster path (one decode of the request,
the answer built straight into a Struct). A Pulumi upgrade that changes what the SDK's path does (how
it decodes inputs, names URNs, encodes answers) would otherwise silently change what the plan records
and what the program reads back. Here one small program, touching every kind of value the real one
sends (nested maps and lists, numbers, booleans, an output of one resource as input of another, a
secret, a parent, dependsOn, protect, a StackReference, an invoke), runs under both monitors with the
same PlanMocks, and everything observable must match: each request the mocks received, each answer
(URN, id, state), and the stack outputs the program resolved.

One difference is intended and kept out of the program: RecordingMonitor hands PlanMocks the wire form,
where a secret nested in a map stays marked on its leaf (so the plan records just that leaf as
"[secret]"); the SDK's decoding marks the whole enclosing map instead.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pytest
from google.protobuf import json_format
from pulumi.runtime import mocks

import plan.runner
from components import declare
from plan.mocks import PlanMocks, RecordingMonitor, plain

HUB = "organization/hub/prod"


def program() -> None:
    group = declare.azure(
        "resources:ResourceGroup",
        "rg",
        {"resourceGroupName": "rg-test", "location": "eastus", "tags": {"team": "infra", "tier": "1"}},
        outputs=["name"],
    )

    class Box(pulumi.ComponentResource):
        def __init__(self, name: str) -> None:
            super().__init__("test:index:Box", name)

    box = Box("box")
    child = pulumi.ResourceOptions(parent=box)
    key = declare.tls(
        "PrivateKey",
        "key",
        {"algorithm": "ECDSA", "ecdsaCurve": "P256"},
        child,
        outputs=["privateKeyPem", "publicKeyPem"],
    )
    vnet = declare.azure(
        "network:VirtualNetwork",
        "vnet",
        {
            "virtualNetworkName": "vnet-test",
            "resourceGroupName": group.output("name"),
            "location": "eastus",
            "addressSpace": {"addressPrefixes": ["10.0.0.0/16", "10.1.0.0/16"]},
            "subnets": [{"name": "a", "addressPrefix": "10.0.0.0/24", "privateEndpointNetworkPolicies": "Disabled"}],
            "enableDdosProtection": False,
            "flowTimeoutInMinutes": 4,
        },
        pulumi.ResourceOptions(parent=box, protect=True, depends_on=[key]),
    )
    password = declare.random("RandomPassword", "password", {"length": 24, "special": False}, child, outputs=["result"])
    secret = declare.azure(
        "keyvault:Secret",
        "secret",
        {
            "vaultName": "kv-test",
            "resourceGroupName": group.output("name"),
            "secretName": "s",
            "properties": {"value": password.output("result"), "contentType": "text/plain"},
        },
        pulumi.ResourceOptions(parent=box, ignore_changes=["tags"]),
    )
    declare.tls(
        "CertRequest",
        "csr",
        {"privateKeyPem": pulumi.Output.secret(key.output("privateKeyPem")), "subject": {"commonName": "test"}},
        child,
        outputs=["certRequestPem"],
    )
    hub = pulumi.StackReference(HUB)
    client = declare.azure_client_config()
    pulumi.export("group", {"id": group.id, "name": group.output("name")})
    pulumi.export("vnet", vnet.id)
    pulumi.export("publicKey", key.output("publicKeyPem"))
    pulumi.export("secretUri", secret.output("properties").apply(lambda p: p["secretUri"]))
    pulumi.export("hubSpace", hub.get_output("addressSpace"))
    pulumi.export("tenant", client.apply(lambda c: c["tenantId"]))


class Observed:
    """What a monitor was asked and answered, kept by wrapping the mocks and the monitor."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.answers: list[dict[str, Any]] = []


class ObservingMocks(PlanMocks):
    def __init__(self, observed: Observed, stack_outputs: dict[str, dict[str, Any]] | None = None) -> None:
        super().__init__(stack_outputs)
        self.observed = observed

    def new_resource(self, args: mocks.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.observed.requests.append(
            {
                "type": args.typ,
                "name": args.name,
                "inputs": plain(args.inputs),
                "provider": args.provider,
                "custom": args.custom,
            }
        )
        return super().new_resource(args)


def _answer(response: Any) -> dict[str, Any]:
    return {"urn": response.urn, "id": response.id, "state": plain(json_format.MessageToDict(response.object))}


def _run(monitor_class: type[mocks.MockMonitor], monkeypatch: pytest.MonkeyPatch) -> tuple[Observed, dict[str, Any]]:
    observed = Observed()

    class Observing(monitor_class):  # type: ignore[valid-type, misc]
        def __init__(self, plan_mocks: PlanMocks) -> None:
            super().__init__(ObservingMocks(observed, plan_mocks.stack_outputs))
            self.registrations = getattr(self, "registrations", [])

        def RegisterResource(self, request: Any) -> Any:  # noqa: N802 - gRPC method name
            response = super().RegisterResource(request)
            if request.type != "pulumi:pulumi:Stack":
                observed.answers.append(_answer(response))
            return response

    monkeypatch.setattr(plan.runner, "RecordingMonitor", Observing)
    run = plan.runner.run_declarations(program, stack_outputs={HUB: {"addressSpace": "10.250.0.0/22"}})
    observed.requests.sort(key=lambda r: (r["type"], r["name"]))  # monitor calls arrive from worker threads
    observed.answers.sort(key=lambda a: a["urn"])
    return observed, run.outputs


@pytest.fixture(scope="module")
def both() -> dict[str, tuple[Observed, dict[str, Any]]]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        ours = _run(RecordingMonitor, monkeypatch)
        sdk = _run(mocks.MockMonitor, monkeypatch)
    return {"ours": ours, "sdk": sdk}


def test_the_mocks_receive_the_same_requests(both):
    ours, sdk = both["ours"][0].requests, both["sdk"][0].requests
    assert [(r["type"], r["name"]) for r in ours] == [(r["type"], r["name"]) for r in sdk]
    assert len(ours) == 8  # group, component, key, vnet, password, secret, CSR, stack reference
    assert ours == sdk
    (csr,) = [r for r in ours if r["name"] == "csr"]
    assert csr["inputs"]["privateKeyPem"] == "[secret]"


def test_the_monitors_answer_the_same(both):
    assert both["ours"][0].answers == both["sdk"][0].answers


def test_the_program_reads_back_the_same_outputs(both):
    ours, sdk = both["ours"][1], both["sdk"][1]
    assert ours == sdk
    assert ours["hubSpace"] == "10.250.0.0/22" and ours["tenant"] == "11111111-1111-1111-1111-111111111111"
    assert ours["secretUri"] == "https://kv-test.vault.azure.net/secrets/s"
