#!/usr/bin/python3
"""supercluster: installs this node's pinned binaries from the manifest, verifying each one.

Runs when the machine image is built (the manifest names each download) and on every boot
before containerd and kubelet (the manifest names none: the image carries every binary, and
one missing or at another version stops the boot). An artifact whose version check already
passes is skipped. Each download is checked against its pinned sha256 (or the sha256 file
the project publishes next to it) before anything is installed, and every installed binary
must then report exactly the pinned version.
Usage: supercluster-install MANIFEST.json
"""

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request

ATTEMPTS = 10


def fetch(url):
    for attempt in range(1, ATTEMPTS + 1):
        try:
            with urllib.request.urlopen(url, timeout=120) as response:
                return response.read()
        except OSError as error:
            if attempt == ATTEMPTS:
                raise
            print(f"install: {url}: {error}; retrying", file=sys.stderr)
            time.sleep(min(30, 2 * attempt))


def reports_version(artifact):
    command = artifact["version_command"]
    if not os.path.exists(command[0]):
        return False
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    return artifact["version_expect"] in result.stdout + result.stderr


def expected_sha256(artifact):
    if artifact.get("sha256"):
        return artifact["sha256"]
    if artifact.get("sha256_url"):
        return fetch(artifact["sha256_url"]).decode().split()[0]
    return None


def place(data, path, mode=0o755):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    handle, staging = tempfile.mkstemp(dir=os.path.dirname(path))
    with os.fdopen(handle, "wb") as out:
        out.write(data)
    os.chmod(staging, mode)
    os.replace(staging, path)


def install(artifact):
    data = fetch(artifact["url"])
    want = expected_sha256(artifact)
    if want is not None and hashlib.sha256(data).hexdigest() != want:
        raise SystemExit(f"install: {artifact['name']}: sha256 mismatch for {artifact['url']}")
    if "files" in artifact:  # a tarball: install the listed members, matched by file name
        wanted = dict(artifact["files"])
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            for member in archive.getmembers():
                target = wanted.pop(os.path.basename(member.name), None)
                if target is not None and member.isfile():
                    place(archive.extractfile(member).read(), target)
        if wanted:
            raise SystemExit(f"install: {artifact['name']}: missing from archive: {sorted(wanted)}")
    else:
        place(data, artifact["path"])
    if not reports_version(artifact):
        raise SystemExit(f"install: {artifact['name']}: installed binary does not report "
                         f"{artifact['version_expect']!r}")


def main(manifest_path):
    with open(manifest_path) as manifest:
        artifacts = json.load(manifest)["artifacts"]
    for artifact in artifacts:
        if reports_version(artifact):
            continue
        if "url" not in artifact:
            raise SystemExit(f"install: {artifact['name']}: not {artifact['version_expect'].strip()!r} in this "
                             "machine's image, and machines download nothing: boot a machine image built "
                             "for these pins (docs/node-image.md)")
        install(artifact)
        print(f"install: {artifact['name']} {artifact['version_expect']} installed")


if __name__ == "__main__":
    main(sys.argv[1])
