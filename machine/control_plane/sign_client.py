#!/usr/bin/python3
"""supercluster: signs one short-lived cluster-admin client certificate, on an apiserver VM, as root.

Never installed: ``plan/credential.py`` sends it through Azure Run Command with the request (a CSR, PEM, on
stdin) and reads the certificate back, so the cluster CA key stays on the apiservers (and in Key Vault) and
the requester's private key never leaves the requester. Whatever the CSR asks, the certificate says
CN=USER, O=system:masters, client authentication only, valid from five minutes ago (clock skew) for HOURS
(at most MAX_HOURS). It is stored nowhere: it cannot be revoked, as no system:masters certificate can, so it
is short and the audit log names USER on every request.
Usage: sign_client.py USER HOURS CA_CERT CA_KEY < request.csr   (prints the certificate, then the CA's)
"""

import datetime
import os
import re
import subprocess
import sys
import tempfile

MAX_HOURS = 8
GROUP = "system:masters"
# A user name the audit log can show as is: "break-glass:alice", "supercluster-deploy".
USER = re.compile(r"[a-z0-9][a-z0-9:._-]{0,62}")
SKEW = datetime.timedelta(minutes=5)
CONFIG = """[ca]
default_ca = signer
[signer]
database = {work}/index.txt
serial = {work}/serial
new_certs_dir = {work}
default_md = sha256
policy = subject
unique_subject = no
copy_extensions = none
x509_extensions = client
[subject]
organizationName = supplied
commonName = supplied
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
"""


def stamp(moment):
    return moment.strftime("%Y%m%d%H%M%SZ")


def sign(user, hours, ca_cert, ca_key, request):
    if not USER.fullmatch(user):
        raise SystemExit(f"sign_client: user {user!r} must match {USER.pattern}")
    if not 1 <= hours <= MAX_HOURS:
        raise SystemExit(f"sign_client: hours {hours} must be 1 to {MAX_HOURS}")
    now = datetime.datetime.now(datetime.timezone.utc)
    with tempfile.TemporaryDirectory() as work:
        os.chmod(work, 0o700)
        open(os.path.join(work, "index.txt"), "w").close()
        with open(os.path.join(work, "serial"), "w") as handle:
            handle.write(os.urandom(16).hex() + "\n")  # random serials: no two certificates share one
        with open(os.path.join(work, "ca.cnf"), "w") as handle:
            handle.write(CONFIG.format(work=work))
        with open(os.path.join(work, "request.csr"), "w") as handle:
            handle.write(request)
        out = os.path.join(work, "client.crt")
        signed = subprocess.run(
            ["openssl", "ca", "-batch", "-notext", "-config", os.path.join(work, "ca.cnf"),
             "-cert", ca_cert, "-keyfile", ca_key, "-in", os.path.join(work, "request.csr"), "-out", out,
             "-subj", f"/O={GROUP}/CN={user}", "-startdate", stamp(now - SKEW),
             "-enddate", stamp(now + datetime.timedelta(hours=hours))],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        if signed.returncode != 0:
            raise SystemExit(f"sign_client: openssl ca failed: {signed.stderr.strip()}")
        with open(out) as handle:
            certificate = handle.read()
    with open(ca_cert) as handle:
        return certificate + handle.read()


def main():
    if len(sys.argv) != 5:
        raise SystemExit(__doc__.strip().splitlines()[-1])
    user, hours, ca_cert, ca_key = sys.argv[1:]
    sys.stdout.write(sign(user, int(hours), ca_cert, ca_key, sys.stdin.read()))


if __name__ == "__main__":
    main()
