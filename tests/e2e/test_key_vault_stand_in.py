"""The box's Key Vault stand-in (``tests/e2e/imds.py``, on Resource Manager's port) as a machine's fetch script and
the token minter use it: a GET of a secret answers its latest value with the stand-in token, 404 for a name it does
not hold and 401 without the token; what a test puts there (``Attestation.put_in_vault``) never replaces what a
writer put (the minter's token). Fast: the stand-in on loopback, plain HTTP, no box."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from tests.e2e import imds
from tests.e2e.attestation import Attestation


@pytest.fixture
def vault(tmp_path):
    with imds.on_loopback(imds.ResourceManager, tmp_path) as url:
        yield url, Attestation(tmp_path)


def _call(url: str, method: str = "GET", body: dict | None = None, token: str | None = imds.ACCESS_TOKEN):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, method=method)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def test_a_secret_written_or_put_there_is_read_back_and_a_put_keeps_the_writers_value(vault):
    url, attestation = vault
    assert _call(f"{url}/secrets/node-bootstrap-token?api-version=7.4", "PUT", {"value": "minted"})[0] == 200
    attestation.put_in_vault({"node-bootstrap-token": "first", "cluster-ca-crt": "ca"})
    assert _call(f"{url}/secrets/node-bootstrap-token?api-version=7.4")[1]["value"] == "minted"
    assert _call(f"{url}/secrets/cluster-ca-crt?api-version=7.4")[1]["value"] == "ca"
    status, answer = _call(f"{url}/secrets/absent?api-version=7.4")
    assert status == 404 and answer["error"]["code"] == "SecretNotFound"
    assert _call(f"{url}/secrets/cluster-ca-crt?api-version=7.4", token=None)[0] == 401
