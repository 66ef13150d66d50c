#!/usr/bin/python3
"""supercluster: tells kubelet this machine's Azure resource ID (its providerID).

cluster-autoscaler's Azure provider maps a node to its scale set by spec.providerID;
without a cloud-controller-manager, kubelet must set it itself. Runs before kubelet on
every boot and writes a kubelet config drop-in.
Usage: supercluster-provider-id DROP_IN_PATH
"""

import json
import os
import sys
import time
import urllib.request

IMDS = os.environ.get("IMDS_ENDPOINT", "http://169.254.169.254")


def compute_metadata():
    request = urllib.request.Request(f"{IMDS}/metadata/instance/compute?api-version=2021-02-01",
                                     headers={"Metadata": "true"})
    for attempt in range(1, 31):
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.load(response)
        except OSError as error:
            if attempt == 30:
                raise
            print(f"provider-id: {error}; retrying", file=sys.stderr)
            time.sleep(2)


def provider_id(compute):
    base = (f"azure:///subscriptions/{compute['subscriptionId']}/resourceGroups/{compute['resourceGroupName']}"
            "/providers/Microsoft.Compute")
    if compute.get("vmScaleSetName"):  # a Uniform scale-set instance is named <scale set>_<instance id>
        instance = compute["name"].rsplit("_", 1)[1]
        return f"{base}/virtualMachineScaleSets/{compute['vmScaleSetName']}/virtualMachines/{instance}"
    return f"{base}/virtualMachines/{compute['name']}"


def main(path):
    drop_in = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
               "providerID": provider_id(compute_metadata())}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    # Readable by root only, like the kubelet's other config files (CIS Kubernetes Benchmark 4.1.9).
    with open(os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
        os.fchmod(out.fileno(), 0o600)
        json.dump(drop_in, out)  # JSON is YAML: kubelet reads it as a config drop-in
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main(sys.argv[1])
