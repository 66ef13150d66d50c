#!/usr/bin/python3
"""supercluster: pulls this node's preload images from the cluster's registry and pins them.

Runs after containerd and before kubelet on every boot. An image already present is only
re-pinned. Otherwise it is imported from the archive the machine image carries; only when
the image has no archive for it is it pulled from its cached copy in the cluster's Azure
Container Registry (over the private endpoint, authenticated with this machine's managed
identity) and tagged with its original name. Each is labelled pinned so kubelet's image GC
keeps it.
Usage: supercluster-preload-images MANIFEST.json
"""

import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request

# Asks the metadata service for a token as the node's role identity (CPU nodes carry two identities).
IMDS_TOKEN = os.environ.get("IMDS_TOKEN", "/usr/local/sbin/supercluster-imds-token")
CTR = os.environ.get("CTR", "/usr/local/bin/ctr")
# ACR's AAD-to-registry token exchange accepts tokens for this audience (ACR "authenticate with
# Microsoft Entra" docs); the username that goes with a refresh token is the all-zero GUID.
ACR_AUDIENCE = "https://containerregistry.azure.net"
ACR_TOKEN_USER = "00000000-0000-0000-0000-000000000000"
PINNED = "io.cri-containerd.pinned=pinned"
ATTEMPTS = 10


def retry(what, action):
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return action()
        except (OSError, subprocess.CalledProcessError) as error:
            if attempt == ATTEMPTS:
                raise
            print(f"preload: {what}: {error}; retrying", file=sys.stderr)
            time.sleep(min(30, 2 * attempt))


def ctr(*args):
    return subprocess.run([CTR, "--namespace", "k8s.io", *args], check=True, capture_output=True,
                          text=True).stdout


def refresh_token(registry):
    aad_token = subprocess.run([IMDS_TOKEN, ACR_AUDIENCE], check=True, capture_output=True, text=True).stdout.strip()
    form = urllib.parse.urlencode({"grant_type": "access_token", "service": registry,
                                   "access_token": aad_token}).encode()
    with urllib.request.urlopen(f"https://{registry}/oauth2/exchange", data=form, timeout=30) as response:
        return json.load(response)["refresh_token"]


def main(manifest_path):
    with open(manifest_path) as manifest:
        plan = json.load(manifest)
    present = set(ctr("images", "list", "--quiet").split())
    token = None
    for image in plan["images"]:
        source, cached = image["source"], image["cached"]
        if source not in present and os.path.exists(image["archive"]):
            ctr("images", "import", "--platform", "linux/amd64", image["archive"])
            print(f"preload: {source} imported from {image['archive']}")
        elif source not in present:
            if token is None:
                token = retry("registry token", lambda: refresh_token(plan["registry"]))
            retry(cached, lambda: ctr("images", "pull", "--user", f"{ACR_TOKEN_USER}:{token}", cached))
            ctr("images", "tag", "--force", cached, source)
            print(f"preload: {source} pulled from {cached}")
        ctr("images", "label", source, PINNED)


if __name__ == "__main__":
    main(sys.argv[1])
