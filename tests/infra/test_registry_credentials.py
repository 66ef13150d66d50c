"""Nodes pull add-on images from the cluster's registry, which refuses anonymous pulls: kubelet's exec
credential provider turns the node's identity into a registry token, and the preload asks it the same way."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler

import pytest

import machine
from infra.node import kubelet, pinned_images
from tests.helpers import json_reply, load_yaml, loopback_server
from tests.infra.test_node_bootstrap import files, spec

PLUGIN = machine.path("node/acr-credential-provider.py")
REGISTRY = "prodacr123456.azurecr.io"


def test_kubelet_asks_the_plugin_for_the_clusters_registry_only():
    rendered = files(spec())
    unit = rendered[f"/etc/systemd/system/{kubelet.UNIT}"]
    assert f"--image-credential-provider-config={kubelet.CREDENTIAL_PROVIDER_CONFIG}" in unit
    assert f"--image-credential-provider-bin-dir={kubelet.CREDENTIAL_PROVIDER_DIR}" in unit
    config = load_yaml(rendered[kubelet.CREDENTIAL_PROVIDER_CONFIG])
    [provider] = config["providers"]
    assert config["apiVersion"] == "kubelet.config.k8s.io/v1" and config["kind"] == "CredentialProviderConfig"
    assert provider["name"] == kubelet.CREDENTIAL_PROVIDER and provider["matchImages"] == [REGISTRY]
    assert provider["apiVersion"] == "credentialprovider.kubelet.k8s.io/v1" and provider["args"] == [REGISTRY]
    path = f"{kubelet.CREDENTIAL_PROVIDER_DIR}/{kubelet.CREDENTIAL_PROVIDER}"
    assert rendered[path] == PLUGIN.read_text()
    # The preload asks the very same plugin.
    assert json.loads(rendered[pinned_images.MANIFEST_PATH])["credential_provider"] == path


class _Exchange(BaseHTTPRequestHandler):
    forms: list[dict] = []

    def do_POST(self):  # noqa: N802 - http.server's name
        length = int(self.headers["Content-Length"])
        self.forms.append(dict(urllib.parse.parse_qsl(self.rfile.read(length).decode())))
        json_reply(self, 200, {"refresh_token": "refresh-123"})

    def log_message(self, *args):
        pass


@pytest.fixture
def exchange():
    with loopback_server(_Exchange) as url:
        yield url


def run_plugin(tmp_path, exchange_url, image):
    token = tmp_path / "imds-token"
    token.write_text('#!/bin/sh\n[ "$1" = https://containerregistry.azure.net ] && echo aad-token\n')
    token.chmod(0o755)
    request = {
        "kind": "CredentialProviderRequest",
        "apiVersion": "credentialprovider.kubelet.k8s.io/v1",
        "image": image,
    }
    env = {"IMDS_TOKEN": str(token), "ACR_EXCHANGE_URL": exchange_url + "/oauth2/exchange", "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, str(PLUGIN), REGISTRY],
        input=json.dumps(request),
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_the_plugin_exchanges_the_node_identity_for_a_registry_token(tmp_path, exchange):
    _Exchange.forms = []
    result = run_plugin(tmp_path, exchange, f"{REGISTRY}/k8s/coredns/coredns:v1.12.0@sha256:{'0' * 64}")
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["kind"] == "CredentialProviderResponse"
    assert answer["apiVersion"] == "credentialprovider.kubelet.k8s.io/v1" and answer["cacheKeyType"] == "Registry"
    assert answer["auth"] == {REGISTRY: {"username": "00000000-0000-0000-0000-000000000000", "password": "refresh-123"}}
    assert _Exchange.forms == [{"grant_type": "access_token", "service": REGISTRY, "access_token": "aad-token"}]


def test_the_plugin_answers_for_no_other_registry(tmp_path, exchange):
    result = run_plugin(tmp_path, exchange, "docker.io/library/python:3.12")
    assert result.returncode != 0 and "is not on" in result.stderr


def test_the_plugin_fails_at_once_when_the_registry_cannot_be_reached(tmp_path):
    # kubelet 1.33 runs the plugin on every container start, even for an image already on the node, and
    # keeps no failed answer: a retry here would hold every pod start on the node while the registry is
    # away. kubelet's image back-off and the preload's own retries do the retrying.
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{unused.getsockname()[1]}"  # bound, not listening: refused
        started = time.monotonic()
        result = run_plugin(tmp_path, closed, f"{REGISTRY}/supercluster/e2e-probe:1")
    assert result.returncode != 0 and "Connection refused" in result.stderr, result.stderr
    assert "retrying" not in result.stderr
    assert time.monotonic() - started < 5
