"""People sign in with Microsoft Entra ID (``peopleSignIn``): the config's one-line refusals, and the apiserver's
``jwt`` authenticator as an apiserver VM receives it in its cloud-init."""

from __future__ import annotations

import re

import pytest

from infra.config.cluster_config import parse_config
from infra.config.errors import ConfigError
from infra.control_plane import apiserver, paths, people_sign_in
from infra.control_plane.apiserver_machine import apiserver_machines
from tests.helpers import PROJECT_DIR, load_yaml, raw_config
from tests.infra.control_plane_files import etcd_flags, files, machines, spec

TENANT = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
CLIENT = "8a7b6c5d-4e3f-4a1b-9c8d-7e6f5a4b3c2d"


def _parsed(sign_in: object):
    raw = raw_config()
    raw["peopleSignIn"] = sign_in
    return parse_config(raw, "eastus")


def _authentication(sign_in: dict[str, str]) -> dict:
    cluster = spec("prod", peopleSignIn=sign_in)
    (first, *_) = apiserver_machines(cluster, etcd_flags(cluster))
    return load_yaml(files(first)[paths.AUTHENTICATION_CONFIG])


def test_without_people_sign_in_there_is_no_token_authenticator_for_people():
    assert parse_config(raw_config(), "eastus").people_sign_in is None
    assert _parsed({}).people_sign_in is None
    config = load_yaml(files(machines("prod")[0])[paths.AUTHENTICATION_CONFIG])
    assert "jwt" not in config
    # The file is byte for byte what it was before peopleSignIn existed: no apiserver of dev or prod rolls.
    assert files(machines("prod")[0])[paths.AUTHENTICATION_CONFIG] == apiserver.authentication_config()


def test_the_tenant_and_application_are_read():
    sign_in = _parsed({"tenantId": TENANT, "clientId": CLIENT}).people_sign_in
    assert (sign_in.tenant_id, sign_in.client_id) == (TENANT, CLIENT)


BAD = {
    "a domain name": ({"tenantId": "contoso.onmicrosoft.com", "clientId": CLIENT}, "tenantId", "a GUID in lowercase"),
    "upper case": ({"tenantId": TENANT.upper(), "clientId": CLIENT}, "tenantId", "a GUID in lowercase"),
    "multi-tenant alias": ({"tenantId": "organizations", "clientId": CLIENT}, "tenantId", "a GUID in lowercase"),
    "braced GUID": ({"tenantId": TENANT, "clientId": "{" + CLIENT + "}"}, "clientId", "a GUID in lowercase"),
    "no client": ({"tenantId": TENANT}, "clientId", "a value: peopleSignIn needs both tenantId and clientId"),
    "no tenant": ({"clientId": CLIENT}, "tenantId", "a value: peopleSignIn needs both tenantId and clientId"),
    "unknown key": ({"tenantId": TENANT, "clientId": CLIENT, "groupsClaim": "roles"}, "groupsClaim", "a known key"),
}


@pytest.mark.parametrize("sign_in,key,accepted", BAD.values(), ids=BAD.keys())
def test_a_bad_value_is_one_line_naming_the_key(sign_in, key, accepted):
    with pytest.raises(ConfigError) as caught:
        _parsed(sign_in)
    message = str(caught.value)
    assert message.startswith(f"invalid config supercluster:peopleSignIn.{key} = ")
    assert f": expected {accepted}" in message
    assert "\n" not in message


def test_a_non_object_is_refused():
    with pytest.raises(ConfigError, match=r"^invalid config supercluster:peopleSignIn = 'x': expected an object"):
        _parsed("x")


def test_the_apiserver_trusts_the_tenants_v2_issuer_for_the_application_only():
    config = _authentication({"tenantId": TENANT, "clientId": CLIENT})
    assert config["apiVersion"] == "apiserver.config.k8s.io/v1beta1"
    (jwt,) = config["jwt"]
    assert jwt["issuer"] == {"url": f"https://login.microsoftonline.com/{TENANT}/v2.0", "audiences": [CLIENT]}
    # The anonymous health paths are untouched beside it.
    assert [c["path"] for c in config["anonymous"]["conditions"]] == ["/healthz", "/livez", "/readyz"]


def test_a_person_is_their_immutable_object_id_and_their_groups_all_prefixed():
    (jwt,) = _authentication({"tenantId": TENANT, "clientId": CLIENT})["jwt"]
    mappings = jwt["claimMappings"]
    assert mappings["username"] == {"claim": "oid", "prefix": "entra:"}
    assert mappings["groups"] == {"expression": "has(claims.groups) ? dyn(claims.groups).map(g, 'entra:' + g) : []"}
    assert set(mappings) == {"username", "groups"}  # no uid or extra from a mutable claim


def test_no_token_may_name_a_system_user_or_group():
    assert not people_sign_in.PREFIX.startswith(people_sign_in.RESERVED_PREFIX)
    assert people_sign_in.group_name("system:masters") == "entra:system:masters"
    (jwt,) = _authentication({"tenantId": TENANT, "clientId": CLIENT})["jwt"]
    assert jwt["userValidationRules"] == [
        {
            "expression": "!user.username.startsWith('system:')",
            "message": "a person's user name may not start with system:",
        },
        {
            "expression": "user.groups.all(g, !g.startsWith('system:'))",
            "message": "a person's groups may not start with system:",
        },
    ]


def test_a_token_without_its_groups_is_refused_rather_than_admitted_without_them():
    (jwt,) = _authentication({"tenantId": TENANT, "clientId": CLIENT})["jwt"]
    (rule,) = jwt["claimValidationRules"]
    assert rule["expression"] == "!('_claim_names' in claims || 'hasgroups' in claims)"
    assert "overage" in rule["message"]


@pytest.mark.parametrize("runbook", ["people-sign-in.md", "team-isolation.md"])
def test_the_runbooks_bind_a_teams_group_under_the_prefix_the_apiserver_gives(runbook):
    text = (PROJECT_DIR / "docs" / "runbooks" / runbook).read_text()
    prefixes = re.findall(r"--group=(\S*)<group object id>", text)
    assert prefixes and set(prefixes) == {people_sign_in.PREFIX}
