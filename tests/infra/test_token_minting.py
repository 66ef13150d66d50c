"""The bootstrap-token minter every apiserver runs: its settings, its rights and the program's decisions.

The program (``machine/control_plane/token_minter.py``) is driven here against an in-memory apiserver that keeps
resourceVersions as the real one does (an update at a stale one is 409), five copies at once as prod's five
apiservers run it, with a clock the test moves. Against the real apiserver (its token authenticator, the admission
policy, tokencleaner): tests/e2e/test_node_labels.py.
"""

from __future__ import annotations

import base64
import copy
import datetime
import functools
import json
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler
from types import ModuleType

import pytest
import yaml

import machine as programs
from infra.addons import monitoring
from infra.addons.monitoring import rules
from infra.boot.secret_names import NODE_BOOTSTRAP_TOKEN
from infra.boot.secrets import FETCH_UNIT, KEY_VAULT_API_VERSION
from infra.config import naming
from infra.control_plane import admission, cluster_objects, paths, pki, token_minting
from infra.facts import attestation
from tests.e2e.plan_machines import parse_unit
from tests.helpers import json_reply, load_program, loopback_server, parsed
from tests.infra.addon_fixtures import prometheus_configs_of, rule_files_of, spec_for
from tests.infra.control_plane_files import files, machines

START = datetime.datetime(2026, 11, 27, 10, 0, tzinfo=datetime.UTC)


@functools.cache
def minter_program() -> ModuleType:
    return load_program("control_plane/token_minter.py")


def settings() -> dict:
    return json.loads(token_minting.minter_config(parsed("prod")))


# ------------------------------------------------------------------------------------------ what the machines get


def test_every_apiserver_runs_the_minter_with_its_own_fetched_credential():
    rendered = [files(m) for m in machines("prod")]
    assert len({r[token_minting.CONFIG] for r in rendered}) == 1
    config = json.loads(rendered[0][token_minting.CONFIG])
    fetched = {f.path for f in pki.apiserver_secret_files(pki.certificates())}
    assert {config["ca_cert"], config["cert"], config["key"]} <= fetched
    (spec,) = [c for c in pki.certificates() if c.key == pki.TOKEN_MINTER]
    assert (spec.common_name, spec.organization) == (pki.TOKEN_MINTER_USER, None)  # in no group
    assert rendered[0][token_minting.SCRIPT] == programs.source("control_plane/token_minter.py")
    unit = parse_unit(token_minting.UNIT, rendered[0][f"/etc/systemd/system/{token_minting.UNIT}"])
    assert unit.exec_start == [token_minting.SCRIPT, token_minting.CONFIG]
    assert {FETCH_UNIT, paths.APISERVER_UNIT} <= set(unit.get("Unit", "After")[0].split())
    assert unit.get("Service", "Restart") == ["always"]


def test_it_writes_the_one_key_vault_secret_nodes_read_as_the_apiservers_identity():
    config = settings()
    assert config["vault"] == f"https://{naming.key_vault('prod')}.vault.azure.net"
    assert config["vault_secret"] == NODE_BOOTSTRAP_TOKEN
    assert config["vault_api_version"] == KEY_VAULT_API_VERSION
    assert config["token_command"][1] == "https://vault.azure.net"


def test_a_token_lives_a_day_and_the_next_is_minted_with_half_of_it_left():
    """A node that read the token just before it was replaced still has LIFETIME - PERIOD to join; a minter that
    stops leaves as long before a new node cannot join. Every figure reaches the program."""
    assert token_minting.LIFETIME_SECONDS == 24 * 3600
    assert token_minting.PERIOD_SECONDS == 12 * 3600
    assert token_minting.LIFETIME_SECONDS - token_minting.PERIOD_SECONDS >= 6 * 3600
    assert token_minting.CHECK_SECONDS < token_minting.CLAIM_SECONDS < token_minting.PERIOD_SECONDS
    config = settings()
    assert (config["lifetime_seconds"], config["period_seconds"]) == (
        token_minting.LIFETIME_SECONDS,
        token_minting.PERIOD_SECONDS,
    )
    assert config["token_lengths"] == [token_minting.TOKEN_ID_LENGTH, token_minting.TOKEN_SECRET_LENGTH]
    assert config["token_alphabet"] == token_minting.TOKEN_ALPHABET


def test_the_first_token_the_program_declares_expires_too():
    expires = token_minting.first_token_expiration(START)
    assert expires == "2026-11-28T10:00:00Z"
    assert token_minting.bootstrap_token_data("abc123", "0123456789abcdef", expires)["expiration"] == expires


# ------------------------------------------------------------------------------------------ its rights


def test_its_rbac_is_create_secrets_and_its_own_lease_in_kube_system_only():
    role, binding = cluster_objects.token_minter_rbac()
    assert role["kind"] == "Role" and role["metadata"]["namespace"] == "kube-system"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [token_minting.LEASE],
            "verbs": ["get", "update"],
        },
    ]
    assert binding["kind"] == "RoleBinding" and binding["metadata"]["namespace"] == "kube-system"
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": pki.TOKEN_MINTER_USER}
    ]


def test_its_policy_judges_only_its_requests_and_demands_what_a_token_of_ours_is():
    policy, binding = admission.token_minter_policy()
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConditions"] == [
        {"name": "token-minter-only", "expression": f"request.userInfo.username == '{pki.TOKEN_MINTER_USER}'"}
    ]
    assert {r["resources"][0] for r in spec["matchConstraints"]["resourceRules"]} == {"secrets", "leases"}
    expressions = " ".join(v["expression"] for v in spec["validations"])
    group = base64.b64encode(attestation.BOOTSTRAP_GROUP.encode()).decode()
    for needed in (
        "object.type == 'bootstrap.kubernetes.io/token'",
        "'expiration' in object.data",
        # The API's base64 text of each value: what the apiserver hands the policy.
        f"string(object.data['auth-extra-groups']) == '{group}'",
        "string(object.data['usage-bootstrap-authentication']) == 'dHJ1ZQ=='",
        f"object.metadata.name == '{token_minting.LEASE}'",
    ):
        assert needed in expressions, needed
    # No signing: the allowed keys leave out usage-bootstrap-signing.
    assert "usage-bootstrap-signing" not in expressions
    assert binding["spec"] == {"policyName": admission.TOKEN_MINTER_POLICY, "validationActions": ["Deny"]}


def test_the_policy_allows_exactly_the_keys_the_program_writes():
    program = minter_program()
    secret = program.token_secret(settings(), "abc123", "0123456789abcdef", START)
    assert token_minting.minted_token_keys() == sorted(secret["stringData"])
    listed = "[" + ", ".join(f"'{k}'" for k in token_minting.minted_token_keys()) + "]"
    validations = admission.token_minter_policy()[0]["spec"]["validations"]
    assert [v for v in validations if f"object.data.all(k, k in {listed})" in v["expression"]]


# ------------------------------------------------------------------------------------------ the program


def test_its_token_is_of_our_group_for_authentication_and_expires_after_its_lifetime():
    program = minter_program()
    token_id, token_value = program.new_token(settings())
    assert (
        len(token_id) == 6
        and len(token_value) == 16
        and set(token_id + token_value) <= set(token_minting.TOKEN_ALPHABET)
    )
    secret = program.token_secret(settings(), token_id, token_value, START)
    assert secret["metadata"] == {
        "name": f"bootstrap-token-{token_id}",
        "namespace": "kube-system",
        "labels": {token_minting.MINTED_LABEL: token_minting.MINTED_BY},
    }
    assert secret["type"] == "bootstrap.kubernetes.io/token"
    assert secret["stringData"] == token_minting.bootstrap_token_data(token_id, token_value, "2026-11-28T10:00:00Z")


class FakeApiserver:
    """Leases and Secrets as the apiserver keeps them: an update at a stale resourceVersion is 409."""

    def __init__(self):
        self.objects: dict[str, dict] = {}
        self.version = 0
        self.calls: list[tuple[str, str]] = []

    def _error(self, path, code):
        return urllib.error.HTTPError(path, code, "", {}, None)

    def __call__(self, method, path, body=None):
        self.calls.append((method, path))
        if method == "GET":
            if path not in self.objects:
                raise self._error(path, 404)
            return copy.deepcopy(self.objects[path])
        key = path if method == "PUT" else f"{path}/{body['metadata']['name']}"
        if method == "POST" and key in self.objects:
            raise self._error(path, 409)
        if method == "PUT" and self.objects[key]["metadata"]["resourceVersion"] != body["metadata"]["resourceVersion"]:
            raise self._error(path, 409)
        self.version += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.objects[key] = stored
        return copy.deepcopy(stored)

    def tokens(self) -> list[dict]:
        return [o for o in self.objects.values() if o.get("type") == "bootstrap.kubernetes.io/token"]


def _minters(count, api, vault, clock):
    program = minter_program()
    minters = [program.Minter(settings(), api=api, vault=vault.append, clock=clock) for _ in range(count)]
    for index, minter in enumerate(minters):
        minter.identity = f"prod-apiserver-{index}"
    return minters


def test_five_copies_mint_one_token_a_period_and_key_vault_always_holds_a_valid_one():
    api, vault, now = FakeApiserver(), [], [START]
    minters = _minters(5, api, vault, lambda: now[0])
    for _ in range(4 * 24 * 60 // 10):  # four days, every copy looking every ten minutes
        for minter in minters:
            minter.cycle()
        now[0] += datetime.timedelta(minutes=10)
        (held,) = [t for t in api.tokens() if t["stringData"]["token-id"] == vault[-1].split(".")[0]]
        expires = datetime.datetime.strptime(held["stringData"]["expiration"], "%Y-%m-%dT%H:%M:%SZ")
        # What a node reads now is valid for at least LIFETIME - PERIOD more (less the ten minutes just passed).
        assert (expires.replace(tzinfo=datetime.UTC) - now[0]).total_seconds() >= 12 * 3600 - 600
    assert len(vault) == len(api.tokens()) == 4 * 2  # one every twelve hours, the first at once
    assert len({t["metadata"]["name"] for t in api.tokens()}) == 8
    assert not [m for m, p in api.calls if m == "DELETE"]  # tokencleaner deletes, not the minter


def test_copies_that_look_at_once_mint_once():
    """All five read the Lease before any claims it: the apiserver takes one claim, the others get 409."""
    api, vault = FakeApiserver(), []
    minters = _minters(5, api, vault, lambda: START)
    minters[0].lease()
    program = minter_program()
    leases = [m.lease() for m in minters]
    assert all(
        program.due(lease, None, m.identity, settings(), START)[0] for m, lease in zip(minters, leases, strict=True)
    )
    real_lease = [m.lease for m in minters]
    for minter, lease in zip(minters, leases, strict=True):
        minter.lease = lambda lease=lease: copy.deepcopy(lease)  # each decides on what it read before the others
    results = [m.cycle() for m in minters]
    assert len(vault) == len(api.tokens()) == 1
    assert results[1:] == ["another copy claimed the Lease first"] * 4
    for minter, lease in zip(minters, real_lease, strict=True):
        minter.lease = lease
    assert all(m.cycle().startswith("not due") for m in minters)


def test_a_cycle_reads_the_mint_time_from_the_lease_once_for_its_metric_and_its_decision(monkeypatch):
    api, vault, now = FakeApiserver(), [], [START]
    (minter,) = _minters(1, api, vault, lambda: now[0])
    assert minter.cycle().startswith("minted")
    annotation = api.objects[minter.lease_path]["metadata"]["annotations"][settings()["minted_annotation"]]
    program, read = minter_program(), []
    monkeypatch.setattr(program, "epoch", lambda text, parse=program.epoch: read.append(text) or parse(text))
    now[0] += datetime.timedelta(hours=1)
    assert minter.cycle() == "not due: the token in Key Vault was minted 3600 s ago"
    assert read.count(annotation) == 1 and minter.minted == START.timestamp()


def test_a_copy_that_dies_while_minting_is_taken_over_once_its_claim_lapses():
    api, vault, now = FakeApiserver(), [], [START]
    first, second = _minters(2, api, vault, lambda: now[0])

    def unreachable(value):
        raise OSError("Key Vault did not answer")

    first.vault = unreachable
    with pytest.raises(OSError):
        first.cycle()
    assert len(api.tokens()) == 1 and vault == []  # minted, never in Key Vault: it simply expires
    assert second.cycle() == "not due: prod-apiserver-0 is minting"
    now[0] += datetime.timedelta(seconds=token_minting.CLAIM_SECONDS + 1)
    assert second.cycle().startswith("minted bootstrap-token-")
    assert len(vault) == 1 and len(api.tokens()) == 2
    lease = api.objects[f"{second.leases}/{token_minting.LEASE}"]
    assert lease["spec"]["holderIdentity"] is None
    assert lease["metadata"]["annotations"][token_minting.MINTED_ANNOTATION] == "2026-11-27T10:02:01Z"
    assert lease["metadata"]["annotations"][token_minting.TOKEN_ID_ANNOTATION] == vault[0].split(".")[0]


def test_while_key_vault_refuses_it_retries_with_the_token_it_made_rather_than_make_more():
    api, vault, now = FakeApiserver(), [], [START]
    (minter,) = _minters(1, api, vault, lambda: now[0])
    refusals = [OSError("403 from Key Vault")] * 3

    def flaky(value):
        if refusals:
            raise refusals.pop()
        vault.append(value)

    minter.vault = flaky
    for _ in range(3):
        with pytest.raises(OSError):
            minter.cycle()
        now[0] += datetime.timedelta(seconds=10)
    assert minter.cycle().startswith("minted bootstrap-token-")
    (token,) = api.tokens()
    assert vault == [f"{token['stringData']['token-id']}.{token['stringData']['token-secret']}"]
    lease = api.objects[minter.lease_path]
    # Counted from the token's making, so the next comes while it still has LIFETIME - PERIOD left.
    assert lease["metadata"]["annotations"][token_minting.MINTED_ANNOTATION] == "2026-11-27T10:00:00Z"


def test_it_puts_the_token_into_key_vault_with_its_identitys_token():
    """The Key Vault request itself, against a loopback server: PUT of the secret's value, at the API version the
    fetch reads it with, with the access token the IMDS helper printed."""
    seen = []

    class Vault(BaseHTTPRequestHandler):
        def do_PUT(self):  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append((self.path, self.headers["Authorization"], json.loads(body)))
            json_reply(self, 200, {})

        def log_message(self, *args):
            pass

    with loopback_server(Vault) as url:
        config = {**settings(), "vault": url, "token_command": ["echo", "stand-in-token"]}
        minter_program().Minter(config, api=FakeApiserver()).write_to_vault("abc123.0123456789abcdef")
    assert seen == [
        (
            f"/secrets/{NODE_BOOTSTRAP_TOKEN}?api-version={KEY_VAULT_API_VERSION}",
            "Bearer stand-in-token",
            {"value": "abc123.0123456789abcdef"},
        )
    ]


# ------------------------------------------------------------------------------------------ what monitoring reads


def test_every_copy_serves_the_mint_time_the_lease_holds_on_its_machines_own_address(tmp_path):
    """A copy that never mints (another holds the period) still publishes the mint time, read from the Lease, so
    one alert covers the five; before any Lease is read there is no sample (the alert on absence fires). It binds
    the address the identity unit writes, the one the monitoring NSG rule admits, not a wildcard."""
    api, vault = FakeApiserver(), []
    minter, other = _minters(2, api, vault, lambda: START)
    config = settings()
    address_file = tmp_path / "machine.env"
    address_file.write_text(f"OTHER=1\n{config['metrics']['address_variable']}=127.0.0.1\n")
    other.config = {**config, "metrics": {**config["metrics"], "address_file": str(address_file), "port": 0}}
    server = other.serve_metrics()
    url = f"http://{server.server_address[0]}:{server.server_address[1]}/metrics"

    def served() -> list[str]:
        with urllib.request.urlopen(url, timeout=10) as response:
            return [line for line in response.read().decode().splitlines() if not line.startswith("#")]

    try:
        assert server.server_address[0] == "127.0.0.1"
        assert served() == []
        minter.cycle()  # mints at START
        assert served() == []  # the other copy has not read the Lease yet
        assert other.cycle().startswith("not due")
        assert served() == [f"{token_minting.MINTED_METRIC} {START.timestamp():.0f}"]
    finally:
        server.shutdown()
        server.server_close()


def test_the_control_plane_shard_scrapes_every_apiserver_on_the_port_the_minter_serves():
    """The port in the program's settings is the port the control-plane shard scrapes on every apiserver's address
    (plain HTTP, no credential sent); the NSG admits only the monitoring pools to it
    (tests/stacks/test_network_plan.py)."""
    port = settings()["metrics"]["port"]
    configs = prometheus_configs_of(spec_for("prod"))
    jobs = {j["job_name"]: j for j in yaml.safe_load(configs[monitoring.CONTROL_PLANE_SHARD])["scrape_configs"]}
    job = jobs[rules.JOB_TOKEN_MINTER]
    assert job["scheme"] == "http" and "authorization" not in job and "basic_auth" not in job
    assert job["relabel_configs"][-1]["replacement"] == f"${{1}}:{port}"
    assert settings()["metrics"]["metric"] in json.dumps(rule_files_of(spec_for("prod")))
