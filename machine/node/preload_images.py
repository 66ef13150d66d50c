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

CTR = os.environ.get("CTR", "/usr/local/bin/ctr")
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


def credentials(provider, registry, image):
    """``user:password`` for the registry, asked of kubelet's credential provider as kubelet asks it."""
    request = {"kind": "CredentialProviderRequest", "apiVersion": "credentialprovider.kubelet.k8s.io/v1",
               "image": image}
    answer = subprocess.run([provider, registry], input=json.dumps(request), check=True,
                            capture_output=True, text=True).stdout
    auth = json.loads(answer)["auth"][registry]
    return f"{auth['username']}:{auth['password']}"


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
                token = retry("registry token",
                              lambda: credentials(plan["credential_provider"], plan["registry"], cached))
            retry(cached, lambda: ctr("images", "pull", "--user", token, cached))
            ctr("images", "tag", "--force", cached, source)
            print(f"preload: {source} pulled from {cached}")
        ctr("images", "label", source, PINNED)


if __name__ == "__main__":
    main(sys.argv[1])
