#!/usr/bin/python3
"""supercluster: what makes this apiserver machine itself, decided at boot instead of by the program.

Reads the machine's own private address from the instance metadata service, as a scale-set instance
learns it (nothing in customData names it), writes it where the control-plane units read it (a
systemd EnvironmentFile: --advertise-address and the controller-manager's and scheduler's
--bind-address), then issues this machine's apiserver serving certificate for that address and the
names every client uses (the load balancer, the ``kubernetes`` Service, loopback), signed with the
cluster CA key the machine has already fetched from Key Vault. A fresh key every run (each boot, and
each time the rollout's readiness gate re-runs it): no serving key is kept anywhere but here.
Usage: supercluster-apiserver-identity CONFIG_JSON   (rendered by infra/control_plane/machine_identity.py)
"""

import ipaddress
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

IMDS = os.environ.get("IMDS_ENDPOINT", "http://169.254.169.254")
# The instance's network as IMDS reports it (Azure's "Instance Metadata Service" documentation, "Network
# metadata"): interface[0].ipv4.ipAddress[0].privateIpAddress is the primary NIC's primary address.
NETWORK_PATH = "/metadata/instance/network?api-version=2021-02-01"
ATTEMPTS = 30
EXTENSIONS = """[serving]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = {sans}
"""


def own_address():
    request = urllib.request.Request(IMDS + NETWORK_PATH, headers={"Metadata": "true"})
    for attempt in range(1, ATTEMPTS + 1):
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                network = json.load(response)
            address = network["interface"][0]["ipv4"]["ipAddress"][0]["privateIpAddress"]
            return str(ipaddress.IPv4Address(address))
        except (OSError, KeyError, IndexError, ValueError) as error:
            if attempt == ATTEMPTS:
                raise SystemExit(f"apiserver-identity: no address from the metadata service: {error}") from error
            print(f"apiserver-identity: {error}; retrying", file=sys.stderr)
            time.sleep(2)


def write(path, text, mode):
    """``text`` at ``path`` with ``mode``, replaced in one step (a reader never sees half a file)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, int(mode, 8)), "w") as out:
        os.fchmod(out.fileno(), int(mode, 8))
        out.write(text)
    os.replace(tmp, path)


def openssl(*args):
    done = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"apiserver-identity: openssl {args[0]} failed: {done.stderr.strip()}")
    return done.stdout


def issue(config, address):
    """``(certificate PEM, key PEM)`` for ``address`` and the configured names, signed by the cluster CA."""
    sans = [f"DNS:{name}" for name in config["dns_names"]]
    sans += [f"IP:{ip}" for ip in [address, *config["ip_addresses"]]]
    with tempfile.TemporaryDirectory() as work:
        os.chmod(work, 0o700)
        key, request, extensions = (os.path.join(work, name) for name in ("key.pem", "request.csr", "ext.cnf"))
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key)
        openssl("req", "-new", "-key", key, "-subj", f"/CN={config['common_name']}", "-out", request)
        with open(extensions, "w") as handle:
            handle.write(EXTENSIONS.format(sans=",".join(sans)))
        certificate = openssl(
            "x509", "-req", "-in", request, "-CA", config["ca_cert"], "-CAkey", config["ca_key"],
            "-set_serial", "0x" + os.urandom(16).hex(), "-days", str(config["validity_days"]), "-sha256",
            "-extfile", extensions, "-extensions", "serving",
        )
        with open(key) as handle:
            return certificate, handle.read()


def main(config_path):
    with open(config_path) as handle:
        config = json.load(handle)
    address = own_address()
    certificate, key = issue(config, address)
    # Key first: the apiserver never finds a certificate next to a key that does not match it for longer
    # than the two renames take (it reads both only when it starts).
    write(config["key"], key, "0600")
    write(config["cert"], certificate, "0644")
    write(config["environment_file"], f"{config['variable']}={address}\n", "0644")
    print(f"apiserver-identity: {address}, serving certificate issued")


if __name__ == "__main__":
    main(sys.argv[1])
