#!/usr/bin/python3
"""supercluster: prints an access token for RESOURCE, as this machine's role identity.

A VM may carry more than one user-assigned identity (CPU nodes also carry the cluster
autoscaler's), and the instance metadata service then needs to be told which one to use.
/etc/supercluster/identity holds the role identity's resource ID below the subscription
(``/resourceGroups/<group>/providers/Microsoft.ManagedIdentity/userAssignedIdentities/<name>``): the
identities live in the cluster's resource group, and a node scale set's VMs in the node resource
group, so the VM's own group does not name it. The subscription is read from the metadata service,
so nothing in cloud-init depends on values known only after deployment.
Usage: supercluster-imds-token RESOURCE   (e.g. https://vault.azure.net)
"""

import json
import os
import sys
import time
import urllib.parse
import urllib.request

IMDS = os.environ.get("IMDS_ENDPOINT", "http://169.254.169.254")
# Where the program is installed, and the file naming its identity (infra/secrets.py imports both).
INSTALLED_PATH = "/usr/local/sbin/supercluster-imds-token"
DEFAULT_IDENTITY_FILE = "/etc/supercluster/identity"
IDENTITY_FILE = os.environ.get("IDENTITY_FILE", DEFAULT_IDENTITY_FILE)
ATTEMPTS = int(os.environ.get("IMDS_ATTEMPTS", "30"))


def get(path, query):
    request = urllib.request.Request(f"{IMDS}{path}?{urllib.parse.urlencode(query)}", headers={"Metadata": "true"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def identity_resource_id():
    with open(IDENTITY_FILE) as handle:
        below_subscription = handle.read().strip()
    compute = get("/metadata/instance/compute", {"api-version": "2021-02-01"})
    return f"/subscriptions/{compute['subscriptionId']}{below_subscription}"


def main(resource):
    for attempt in range(1, ATTEMPTS + 1):
        try:
            token = get("/metadata/identity/oauth2/token", {
                "api-version": "2018-02-01", "resource": resource, "msi_res_id": identity_resource_id()})
            print(token["access_token"])
            return 0
        except (OSError, KeyError, ValueError) as error:
            if attempt == ATTEMPTS:
                print(f"supercluster-imds-token failed: {error}", file=sys.stderr)
                return 1
            time.sleep(min(10, attempt))
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
