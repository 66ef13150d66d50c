"""People sign in to the API with Microsoft Entra ID: the apiservers' ``jwt`` authenticator for ``peopleSignIn``.

A person's ID token, issued by the tenant's v2.0 endpoint to the app registration (its audience is the
application's client ID), authenticates them as ``entra:<object id>`` in the groups ``entra:<group object id>``.
Why these claims (learn.microsoft.com/entra/identity-platform/id-token-claims-reference): ``oid`` is the user's
immutable object ID, never reused; preferred_username, upn, email and name are mutable ("can't be
used to make authorization decisions"). ``groups`` holds the object IDs of the person's groups. Every user and
group name gets the one prefix ``PREFIX``, so no token can name a ``system:`` user or group
(``system:masters`` in a token's groups becomes ``entra:system:masters``, which nothing binds); the user validation
rules state the same invariant to the apiserver.

Groups overage (same page, "Groups overage claim"): a person in more than 200 groups gets no ``groups`` claim but
``_claim_names``/``_claim_sources`` pointing at Microsoft Graph (``hasgroups`` in the implicit flow). Mapped by
``groups.claim``, the apiserver would try to fetch that "distributed claim" from Graph on every request and fail
(it sends no Graph token); mapped by an expression, no fetch happens, and the claim rule below refuses such a
token with a message saying what to change, rather than letting the person in without their groups.

Field names: ``apiserver.config.k8s.io/v1beta1`` ``AuthenticationConfiguration`` (k8s.io/apiserver
pkg/apis/apiserver/v1beta1/types.go, the version every pinned release 1.31-1.34 serves), the same file and API
version as the anonymous-auth conditions (``infra.control_plane.apiserver.authentication_config``).
"""

from __future__ import annotations

from typing import Any

from infra.config.cluster_config import PeopleSignInConfig

# The one prefix of every user and group name a person's token yields; RoleBindings name groups with it.
PREFIX = "entra:"
# What the apiserver reserves for its own users and groups (system:masters, system:nodes, system:anonymous, ...).
RESERVED_PREFIX = "system:"
# The identity claims (learn.microsoft.com/entra/identity-platform/id-token-claims-reference).
USER_CLAIM = "oid"
GROUPS_CLAIM = "groups"
# A JWT's groups overage markers (same page): the groups are not in the token.
OVERAGE_CLAIMS = ("_claim_names", "hasgroups")


def issuer_url(tenant_id: str) -> str:
    """The tenant's v2.0 issuer: the ``iss`` of every token its v2.0 endpoint issues and the ``issuer`` of its
    OpenID discovery document (learn.microsoft.com/entra/identity-platform/v2-protocols-oidc, "Find your app's
    OpenID configuration document URI"; id-token-claims-reference: "If the token was issued by the v2.0
    endpoint, the URI ends in /v2.0")."""
    return f"https://login.microsoftonline.com/{tenant_id}/v2.0"


def group_name(object_id: str) -> str:
    """The Kubernetes group a person in the Entra group ``object_id`` is in: what a RoleBinding's subject names."""
    return PREFIX + object_id


def user_name(object_id: str) -> str:
    """The Kubernetes user name of the person whose Entra object ID is ``object_id``."""
    return PREFIX + object_id


def jwt_authenticator(sign_in: PeopleSignInConfig) -> dict[str, Any]:
    """The ``jwt`` entry of the AuthenticationConfiguration. No ``certificateAuthority``: the apiserver verifies
    login.microsoftonline.com with the machine's system roots."""
    overage = " || ".join(f"'{claim}' in claims" for claim in OVERAGE_CLAIMS)
    return {
        "issuer": {"url": issuer_url(sign_in.tenant_id), "audiences": [sign_in.client_id]},
        "claimValidationRules": [
            {
                "expression": f"!({overage})",
                "message": "the token carries no groups (Entra's groups overage): emit only the groups assigned "
                "to the application (docs/runbooks/people-sign-in.md)",
            }
        ],
        "claimMappings": {
            "username": {"claim": USER_CLAIM, "prefix": PREFIX},
            # An expression, not groups.claim: no distributed-claim fetch from Graph (module docstring). A claim's
            # CEL type is `any`, which map() cannot range over (kube-apiserver 1.33.4 refuses the file: "expression
            # of type 'any' cannot be range of a comprehension"), so dyn() first.
            "groups": {
                "expression": f"has(claims.{GROUPS_CLAIM}) ? dyn(claims.{GROUPS_CLAIM}).map(g, '{PREFIX}' + g) : []"
            },
        },
        "userValidationRules": [
            {
                "expression": f"!user.username.startsWith('{RESERVED_PREFIX}')",
                "message": f"a person's user name may not start with {RESERVED_PREFIX}",
            },
            {
                "expression": f"user.groups.all(g, !g.startsWith('{RESERVED_PREFIX}'))",
                "message": f"a person's groups may not start with {RESERVED_PREFIX}",
            },
        ],
    }
