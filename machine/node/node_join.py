#!/usr/bin/python3
"""supercluster: the node's client certificate, asked for with Azure's proof of which machine asks.

The pinned kubelet cannot attach anything to its bootstrap CSR, so this runs before kubelet at every boot and
makes the CSR itself (a fresh key, system:node:<host name>), sent with the bootstrap token and two annotations
the apiservers' approver checks (machine/control_plane/csr_approver.py): IMDS's attested document, whose nonce
is derived from the request's public key, and the VM's resource ID. The certificate and key are written as
kubelet's store keeps them (a dated file, the -current link) with kubelet's kubeconfig, so kubelet skips its
bootstrap. A certificate valid for another day: nothing to do. Denied (a stale document, say) or failed: asked
again with a new key and document; kubelet, which requires this unit, starts only once it has succeeded. A
bootstrap token the apiserver refuses (401: it expired while the node waited, the minters having stopped) is read
from Key Vault again, at most every ``refetch_seconds`` (a fetch that hangs stopped after
``refetch_timeout_seconds``), so the node joins once a new token is minted, without a restart.
Usage: supercluster-node-join CONFIG_JSON   (rendered by infra/node/join.py)
"""

import base64
import hashlib
import json
import os
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

CSRS = "/apis/certificates.k8s.io/v1/certificatesigningrequests"


def openssl(*args):
    return subprocess.run(["openssl", *args], capture_output=True, check=True).stdout


def call(url, body=None, headers=(), context=None):
    request = urllib.request.Request(url, None if body is None else json.dumps(body).encode(), dict(headers))
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30, context=context) as response:
        return json.load(response)


def imds(config, path, **query):
    return call(f"{config['imds']}{path}?{urllib.parse.urlencode(query)}", headers={"Metadata": "true"})


def request_certificate(config, name, key):
    """The issued certificate (PEM) for a new key at ``key``."""
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key)
    request = openssl("req", "-new", "-key", key, "-subj", f"/O={config['group']}/CN={config['user_prefix']}{name}")
    nonce = hashlib.sha256(openssl("pkey", "-in", key, "-pubout", "-outform", "DER")).hexdigest()
    document = imds(config, config["attested_path"], **{"api-version": config["attested_api_version"],
                                                         "nonce": nonce[: config["nonce_length"]]})
    vm = imds(config, config["compute_path"], **{"api-version": config["compute_api_version"]})["resourceId"]
    with open(config["token_file"]) as handle:
        auth = {"Authorization": "Bearer " + handle.read().strip()}
    context = ssl.create_default_context(cafile=config["ca_cert"])
    csr_url = f"{config['server']}{CSRS}/node-join-{name}-{secrets.token_hex(4)}"
    annotations = {config["document_annotation"]: document["signature"], config["vm_annotation"]: vm}
    call(csr_url.rsplit("/", 1)[0], {
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": csr_url.rsplit("/", 1)[1], "annotations": annotations},
        "spec": {"request": base64.b64encode(request).decode(), "signerName": config["signer"],
                 "usages": ["digital signature", "client auth"]}}, auth, context)
    print(f"node-join: sent {csr_url.rsplit('/', 1)[1]} for VM {vm}", flush=True)
    while True:
        status = call(csr_url, headers=auth, context=context).get("status", {})
        for condition in status.get("conditions") or []:
            if condition.get("type") in ("Denied", "Failed"):
                raise ValueError(f"{condition['type']}: {condition.get('message', '')}")
        if status.get("certificate"):
            return base64.b64decode(status["certificate"])
        time.sleep(2)


def install(config, key, certificate):
    """A dated file (certificate, then key) and the -current link replaced in one step; then the kubeconfig."""
    os.makedirs(config["cert_dir"], mode=0o700, exist_ok=True)
    link = os.path.join(config["cert_dir"], config["current_name"])
    dated = link.replace("-current.pem", time.strftime("-%Y-%m-%d-%H-%M-%S.pem", time.gmtime()))
    with open(os.open(dated, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as out, open(key, "rb") as pem:
        out.write(certificate.rstrip(b"\n") + b"\n" + pem.read())
    os.symlink(dated, link + ".tmp")
    os.replace(link + ".tmp", link)
    with open(os.open(config["kubeconfig"] + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
        out.write(config["kubeconfig_text"])
    os.replace(config["kubeconfig"] + ".tmp", config["kubeconfig"])


def main(config_path):
    with open(config_path) as handle:
        config = json.load(handle)
    current = os.path.join(config["cert_dir"], config["current_name"])
    checked = ["openssl", "x509", "-noout", "-checkend", "86400", "-in", current]
    if os.path.exists(config["kubeconfig"]) and os.path.exists(current) and subprocess.run(checked).returncode == 0:
        return 0
    name = socket.gethostname().strip().lower()  # kubelet's node name: the host name, lower-cased
    refetch_after = 0.0
    while True:
        try:
            with tempfile.TemporaryDirectory() as work:
                key = os.path.join(work, "key.pem")
                install(config, key, request_certificate(config, name, key))
            print(f"node-join: client certificate for {name} installed", flush=True)
            return 0
        except (OSError, KeyError, ValueError, subprocess.SubprocessError) as error:
            print(f"node-join: {error}; asking again in 10 s", flush=True)
            if isinstance(error, urllib.error.HTTPError) and error.code == 401 and time.monotonic() >= refetch_after:
                refetch_after = time.monotonic() + config["refetch_seconds"]
                refetch(config)
            time.sleep(10)


def refetch(config):
    """The boot's Key Vault fetch, run again; one that hangs is stopped, its curl with it, after
    ``refetch_timeout_seconds``, and the loop asks again, as after any failure."""
    print("node-join: the bootstrap token was refused; reading Key Vault again", flush=True)
    try:
        fetch = subprocess.Popen(config["refetch_command"], start_new_session=True)
    except OSError as error:
        print(f"node-join: the fetch did not start: {error}", flush=True)
        return
    try:
        code = fetch.wait(timeout=config["refetch_timeout_seconds"])
    except subprocess.TimeoutExpired:
        os.killpg(fetch.pid, signal.SIGKILL)  # the script and what it runs
        fetch.wait()
        print(f"node-join: the fetch was stopped after {config['refetch_timeout_seconds']} s", flush=True)
        return
    if code != 0:
        print(f"node-join: the fetch exited {code}", flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
