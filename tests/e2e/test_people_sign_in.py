"""People sign in with Microsoft Entra ID against dev's real apiserver, planned with ``peopleSignIn`` set: the
rendered ``jwt`` authenticator (infra/control_plane/people_sign_in.py) as kube-apiserver runs it. The control
plane alone is booted.

Substituted: Microsoft Entra ID. The box has no internet, and a test cannot get tokens from a real tenant. A
stand-in issuer (tests/e2e/entra_issuer.py) serves the OpenID discovery document and the signing keys over HTTPS
on the apiserver machine's own loopback, with a certificate from a CA of the test's own, and the test signs the
tokens with the stand-in's key. The rendered authentication config is used as rendered (issuer URL, audience,
claim mappings, validation rules) with two fields added to its issuer before the apiserver starts:
``discoveryURL`` (where the stand-in serves the document) and ``certificateAuthority`` (the test CA), both
fields of the pinned release's ``AuthenticationConfiguration``. The document's ``issuer`` is still Entra's v2.0
issuer URL for the tenant, so the tokens carry the real ``iss`` and the apiserver checks it as on Azure; only
where the document and keys come from changes.

The stand-in starts only after the apiserver is ready, so the boot also shows what happens when Entra cannot be
reached while an apiserver starts: it becomes ready (the load balancer's probe passes), people's tokens are
refused until the issuer answers, and they are accepted once it does, with no restart.
"""

from __future__ import annotations

import base64
import json
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from infra.control_plane import paths, people_sign_in
from infra.control_plane.paths import APISERVER_UNIT
from plan.stackfile import PROJECT_DIR
from tests.e2e import entra_issuer
from tests.e2e.cluster import Cluster, boot
from tests.e2e.hosts import Host, wait_for
from tests.e2e.pki import issue

pytestmark = pytest.mark.e2e

TENANT = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"  # a made-up tenant and application: no real directory is named
CLIENT = "8a7b6c5d-4e3f-4a1b-9c8d-7e6f5a4b3c2d"
OTHER_CLIENT = "1b2c3d4e-5f6a-4b7c-8d9e-0f1a2b3c4d5e"
OTHER_TENANT = "9e8d7c6b-5a49-4382-b1a0-f9e8d7c6b5a4"
PERSON = "6d5c4b3a-2918-4a7b-8c6d-5e4f3a2b1c0d"  # the person's object ID (oid)
TEAM_GROUP = "3c4d5e6f-7a8b-4c9d-8e0f-1a2b3c4d5e6f"  # their team's Entra group object ID
STAND_IN_PORT = 9443  # on the apiserver machine's loopback; no rendered unit listens there
KEY_ID = "box-signing-key"
# The apiserver retries the issuer's discovery every 10 s until it answers (k8s.io/apiserver
# plugin/pkg/authenticator/token/oidc/oidc.go, wait.PollUntilContextCancel(ctx, 10*time.Second, ...)).
ISSUER_RETRY_BOUND = 60
SELF_SUBJECT_REVIEW = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


@dataclass
class Issuer:
    folder: Path
    key: rsa.RSAPrivateKey
    ca_pem: str


@dataclass
class Box:
    cluster: Cluster
    issuer: Issuer
    apiserver: Host
    ready_without_issuer: int  # the apiserver's /readyz while the issuer was unreachable
    refused_without_issuer: int  # a good token's status then
    accepted_after: float  # seconds from the stand-in's start to the first accepted token
    version: str  # kube-apiserver --version


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _jwk(key: rsa.RSAPrivateKey) -> dict[str, str]:
    numbers = key.public_key().public_numbers()
    n = numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big")
    e = numbers.e.to_bytes((numbers.e.bit_length() + 7) // 8, "big")
    return {"kty": "RSA", "use": "sig", "alg": "RS256", "kid": KEY_ID, "n": _b64(n), "e": _b64(e)}


def _write_issuer(folder: Path) -> Issuer:
    folder.mkdir()
    ca = issue("entra-stand-in-ca", uses=("cert_signing", "digital_signature"), hours=4)
    serving = issue(
        "entra-stand-in",
        uses=("digital_signature", "key_encipherment", "server_auth"),
        hours=4,
        ip_addresses=("127.0.0.1",),
        ca=ca,
    )
    (folder / "cert.pem").write_text(serving.cert_pem)
    (folder / "key.pem").write_text(serving.key_pem)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    base = f"https://127.0.0.1:{STAND_IN_PORT}"
    discovery = {
        "issuer": people_sign_in.issuer_url(TENANT),
        "jwks_uri": base + entra_issuer.KEYS_PATH,
        "id_token_signing_alg_values_supported": ["RS256"],
        "response_types_supported": ["code", "id_token"],
        "subject_types_supported": ["pairwise"],
    }
    (folder / "openid-configuration.json").write_text(json.dumps(discovery))
    (folder / "keys.json").write_text(json.dumps({"keys": [_jwk(key)]}))
    return Issuer(folder, key, ca.cert_pem)


def _discovery_url() -> str:
    return f"https://127.0.0.1:{STAND_IN_PORT}/{TENANT}/v2.0{entra_issuer.DISCOVERY_SUFFIX}"


def _point_at_stand_in(cluster: Cluster, issuer: Issuer) -> None:
    """The one substitution (module docstring): the rendered jwt issuer, plus where to fetch its document."""
    for machine in cluster.plan.apiserver_instances():
        host = cluster.network.hosts[machine.name]
        path = host.root / paths.AUTHENTICATION_CONFIG.lstrip("/")
        config = yaml.safe_load(path.read_text())
        (jwt,) = config["jwt"]
        assert jwt["issuer"]["url"] == people_sign_in.issuer_url(TENANT), "the plan did not render peopleSignIn"
        jwt["issuer"]["discoveryURL"] = _discovery_url()
        jwt["issuer"]["certificateAuthority"] = issuer.ca_pem
        path.write_text(yaml.safe_dump(config, sort_keys=False))


def token(issuer: Issuer, *, key: rsa.RSAPrivateKey | None = None, **changes: Any) -> str:
    """An ID token as Entra's v2.0 endpoint issues one for the person (claims: learn.microsoft.com/entra/
    identity-platform/id-token-claims-reference), RS256-signed with the stand-in's key or ``key``; a change of
    ``None`` drops that claim."""
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": people_sign_in.issuer_url(TENANT),
        "aud": CLIENT,
        "iat": now - 30,
        "nbf": now - 30,
        "exp": now + 3600,
        "oid": PERSON,
        "sub": "pairwise-subject-of-the-person",
        "tid": TENANT,
        "ver": "2.0",
        "preferred_username": "someone@contoso.example",  # mutable: never the user name
        "groups": [TEAM_GROUP],
    }
    claims.update(changes)
    claims = {name: value for name, value in claims.items() if value is not None}
    header = {"alg": "RS256", "kid": KEY_ID, "typ": "JWT"}
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}".encode()
    signature = (key or issuer.key).sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input.decode()}.{_b64(signature)}"


def call_api(cluster: Cluster, bearer: str, method: str, path: str, body: dict | None = None) -> tuple[int, Any]:
    """``(HTTP status, parsed body)`` of one request to the API through the load balancer with ``bearer``."""
    argv = ["curl", "-s", "-o", "-", "-w", "\n%{http_code}", "--max-time", "10", "-X", method]
    argv += ["--cacert", str(cluster.workdir / "ca.crt"), "-H", f"Authorization: Bearer {bearer}"]
    if body is not None:
        argv += ["-H", "Content-Type: application/json", "--data-binary", json.dumps(body)]
    result = cluster.network.run(cluster.admin, [*argv, cluster.apiserver_url + path], check=False, timeout=30)
    text, _, status = result.stdout.rpartition("\n")
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = text
    return int(status or 0), parsed


def review(cluster: Cluster, bearer: str) -> tuple[int, Any]:
    """A SelfSubjectReview: who the apiserver says the bearer is."""
    return call_api(
        cluster,
        bearer,
        "POST",
        SELF_SUBJECT_REVIEW,
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )


@pytest.fixture(scope="module")
def box(binaries: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Box]:
    workdir = tmp_path_factory.mktemp("dev-people-sign-in")
    issuer = _write_issuer(workdir / "entra-stand-in")
    overrides = [f"peopleSignIn.tenantId={TENANT}", f"peopleSignIn.clientId={CLIENT}"]
    cluster = boot(
        "dev",
        workdir / "cluster",
        binaries,
        overrides=overrides,
        with_nodes=False,
        prepare=lambda c: _point_at_stand_in(c, issuer),
    )
    try:
        # Booted, so every apiserver answered /readyz 200 with the issuer unreachable (nothing on its port yet).
        (machine,) = [m for m in cluster.plan.apiserver_instances() if m.has_unit(APISERVER_UNIT)]
        host = cluster.network.hosts[machine.name]
        ready = cluster.raw("/readyz", url=f"https://{machine.ip}:6443")[0]
        refused = review(cluster, token(issuer))[0]
        version = cluster.network.run(host, ["/usr/local/bin/kube-apiserver", "--version"]).stdout.strip()
        started = time.monotonic()
        cluster.network.start(
            host,
            "entra-stand-in",
            [sys.executable, str(Path(entra_issuer.__file__)), "127.0.0.1", str(STAND_IN_PORT), str(issuer.folder)],
            env={"PYTHONPATH": str(PROJECT_DIR)},  # it imports tests/helpers.py
        )
        wait_for(
            "the apiserver to accept a person's token once the issuer answers",
            lambda: review(cluster, token(issuer))[0] == 201,
            timeout=ISSUER_RETRY_BOUND,
            interval=1,
            on_timeout=cluster.describe,
        )
        yield Box(cluster, issuer, host, ready, refused, time.monotonic() - started, version)
    finally:
        cluster.close()


def test_the_apiserver_is_ready_while_entra_is_unreachable_and_refuses_tokens_until_it_answers(box: Box):
    assert box.version.startswith("Kubernetes v"), box.version
    assert box.ready_without_issuer == 200
    assert box.refused_without_issuer == 401
    assert box.accepted_after < ISSUER_RETRY_BOUND


def test_a_persons_token_authenticates_them_as_their_prefixed_object_id_and_groups(box: Box):
    status, answer = review(box.cluster, token(box.issuer))
    assert status == 201, answer
    user = answer["status"]["userInfo"]
    assert user["username"] == people_sign_in.user_name(PERSON) == f"entra:{PERSON}"
    assert sorted(user["groups"]) == sorted([people_sign_in.group_name(TEAM_GROUP), "system:authenticated"])


def test_kubectl_auth_whoami_names_the_person(box: Box):
    config = yaml.safe_load(box.cluster.kubeconfig.read_text())
    config["users"] = [{"name": "admin", "user": {"token": token(box.issuer)}}]
    kubeconfig = box.cluster.workdir / "person.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    answer = json.loads(box.cluster.kubectl("auth", "whoami", "-o", "json", kubeconfig=kubeconfig).stdout)
    assert answer["status"]["userInfo"]["username"] == f"entra:{PERSON}"


OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
REFUSED = {
    "another application's token": {"aud": OTHER_CLIENT},
    "an expired token": {
        "iat": int(time.time()) - 7200,
        "nbf": int(time.time()) - 7200,
        "exp": int(time.time()) - 3600,
    },
    "another tenant's issuer": {"iss": people_sign_in.issuer_url(OTHER_TENANT)},
    "no object id": {"oid": None},
    "groups overage (more than 200 groups)": {
        "groups": None,
        "_claim_names": {"groups": "src1"},
        "_claim_sources": {"src1": {"endpoint": "https://graph.microsoft.com/v1.0/users/x/getMemberObjects"}},
    },
}


@pytest.mark.parametrize("changes", REFUSED.values(), ids=REFUSED.keys())
def test_a_token_not_issued_to_the_application_by_the_tenant_is_refused(box: Box, changes: dict):
    assert review(box.cluster, token(box.issuer, **changes))[0] == 401


def test_a_token_signed_by_another_key_is_refused(box: Box):
    # The published key's id, another key's signature: only the signature can tell them apart.
    assert review(box.cluster, token(box.issuer, key=OTHER_KEY))[0] == 401


def test_a_token_naming_system_masters_gets_only_the_prefixed_group_and_no_write(box: Box):
    masters = token(box.issuer, groups=["system:masters", "system:nodes"])
    status, answer = review(box.cluster, masters)
    assert status == 201, answer
    groups = answer["status"]["userInfo"]["groups"]
    assert sorted(groups) == ["entra:system:masters", "entra:system:nodes", "system:authenticated"]
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"masters-{uuid.uuid4().hex[:6]}"}}
    assert call_api(box.cluster, masters, "POST", "/api/v1/namespaces", namespace)[0] == 403
    assert call_api(box.cluster, masters, "GET", "/api/v1/secrets")[0] == 403


def test_a_teams_rolebinding_to_its_entra_group_is_what_the_persons_token_gets(box: Box):
    namespace = f"team-{uuid.uuid4().hex[:6]}"
    box.cluster.kubectl("create", "namespace", namespace)
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "team-edit", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": people_sign_in.group_name(TEAM_GROUP)}
        ],
    }
    box.cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(binding))
    member, outsider = token(box.issuer), token(box.issuer, groups=[str(uuid.uuid4())])
    pods = f"/api/v1/namespaces/{namespace}/pods"
    wait_for("the binding to take effect", lambda: call_api(box.cluster, member, "GET", pods)[0] == 200, timeout=20)
    assert call_api(box.cluster, outsider, "GET", pods)[0] == 403
    assert call_api(box.cluster, member, "GET", "/api/v1/namespaces/default/pods")[0] == 403
