"""The offline plan of a stack that peers to another team's hub: example outputs by default, said so
in the summary, or the real ones with --stack-outputs."""

from __future__ import annotations

import json

import pytest
import yaml

from plan.__main__ import main

# Each test writes prod's whole plan directory through the CLI (seconds each).
pytestmark = pytest.mark.slow

HUB_STACK = "organization/research-hub/prod"
REAL_HUB = {
    "vnetId": "/subscriptions/44444444-4444-4444-4444-444444444444/resourceGroups/net-rg"
    "/providers/Microsoft.Network/virtualNetworks/research-hub",
    "resourceGroupName": "net-rg",
    "vnetName": "research-hub",
    "addressSpace": ["192.168.100.0/22"],
    "routeTableName": "vpn-clients-rt",
    "gatewayTransit": True,
}


def test_without_stack_outputs_the_plan_uses_example_hub_outputs_and_says_so(tmp_path, capsys):
    assert main(["--stack", "prod", "--out", str(tmp_path / "p")]) == 0
    printed = capsys.readouterr().out
    assert f"Peered to the hub of stack `{HUB_STACK}`; this plan read example outputs" in printed
    outputs = json.loads((tmp_path / "p" / "outputs.json").read_text())
    assert outputs["network"]["hub"]["resourceGroupName"] == "example-hub-rg"


def test_stack_outputs_from_a_file_are_what_the_plan_peers_to(tmp_path, capsys):
    file = tmp_path / "hub.yaml"
    file.write_text(yaml.safe_dump({HUB_STACK: REAL_HUB}))
    assert main(["--stack", "prod", "--out", str(tmp_path / "p"), "--stack-outputs", str(file)]) == 0
    assert "this plan read the outputs given with --stack-outputs" in capsys.readouterr().out
    resources = json.loads((tmp_path / "p" / "resources.json").read_text())
    route = next(r for r in resources if r["name"] == "prod-hub-peerings-services")
    assert (route["inputs"]["resourceGroupName"], route["inputs"]["routeTableName"]) == ("net-rg", "vpn-clients-rt")
    ours = next(r for r in resources if r["name"] == "prod-hub-peerings-system-to-hub")
    assert ours["inputs"]["remoteVirtualNetwork"]["id"] == REAL_HUB["vnetId"]
    assert ours["inputs"]["useRemoteGateways"] is True
    apiserver_nsg = next(r for r in resources if r["name"] == "prod-apiserver-nsg")
    from_hub = next(r for r in apiserver_nsg["inputs"]["securityRules"] if r["name"] == "allow-apiserver-from-hub")
    assert from_hub["sourceAddressPrefixes"] == ["192.168.100.0/22"]


def test_a_broken_hub_contract_or_outputs_file_is_one_line(tmp_path, capsys):
    file = tmp_path / "hub.json"
    file.write_text(json.dumps({HUB_STACK: {**REAL_HUB, "addressSpace": ["10.9.0.0/16"]}}))
    assert main(["--stack", "prod", "--out", str(tmp_path / "p"), "--stack-outputs", str(file)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "network.hub.stack" in err and "overlaps network.addressSpace" in err
    file.write_text("[not, a, mapping]")
    assert main(["--stack", "prod", "--out", str(tmp_path / "p"), "--stack-outputs", str(file)]) == 2
    assert "--stack-outputs" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()
