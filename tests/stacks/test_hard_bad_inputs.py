"""Hard bad inputs, end to end through the real entry point: each exits 2 with one line naming the
key (or the file, line and column), no traceback and no plan directory.

Categories: YAML oddities in a stack file (``--config-file``, as the Pulumi CLI's) and in
``--config``; reserved and non-private ranges; keys, versions and regions that cannot work; host-port
clashes; impossible pools. Every case runs ``python -m plan`` in its own process.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from plan.stackfile import PROJECT_DIR
from tests.helpers import raw_stack

# The second stage of scripts/test.sh (tens of seconds): one plan CLI process per bad input.
pytestmark = pytest.mark.slow

DEV = (PROJECT_DIR / "Pulumi.dev.yaml").read_text()
DEV_POOLS = len(raw_stack("dev")["nodePools"])  # --config may set an index up to this one (an append)


def line_of(text: str) -> int:
    """The 1-based line of Pulumi.dev.yaml that starts with ``text``."""
    return next(i for i, line in enumerate(DEV.splitlines(), 1) if line.startswith(text))


ETCD_MEMBERS = line_of("    members: 1")


def edited(old: str, new: str) -> str:
    assert old in DEV, old
    return DEV.replace(old, new, 1)


OLD_PLACEHOLDER_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDevOnlyKeyReplaceWithYourOwnKeyDevOnlyKey0 platform@supercluster"
)
ECDSA_KEY = (
    "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBEmKSENjQEezOmxkZMy7opKgwFB"
    "9nkt5YRrYMjNuG5N87uRgg6CLrbo5wAdT/y6v0mKV0U2w0WZ2YB/++Tpockg= x@y"
)

# name: (stack file text or None for Pulumi.dev.yaml, --config overrides, text the one line must contain)
CASES = {
    # YAML oddities in the stack file
    "duplicate key": (
        edited("    members: 1\n", "    members: 3\n    members: 1\n"),
        [],
        f"Pulumi.x.yaml:{ETCD_MEMBERS + 1}:5 = 'members: 1': expected each key once (duplicate key 'members'",
    ),
    "sexagesimal count": (edited("maxNodes: 3", "maxNodes: 1:30"), [], "nodePools[1].maxNodes = '1:30'"),
    "binary tag": (
        edited("clusterName: dev", "clusterName: !!binary ZGV2"),
        [],
        f"Pulumi.x.yaml:{line_of('  supercluster:clusterName')}:29 = '!!binary ZGV2'",
    ),
    "set tag": (edited("      headroomNodes:\n        cpu: 1", "      headroomNodes: !!set {cpu}"), [], "!!set"),
    "timestamp tag": (edited("clusterName: dev", "clusterName: !!timestamp 2024-01-01"), [], "!!timestamp"),
    "date as a name": (edited("clusterName: dev", "clusterName: 2024-01-01"), [], "a date is text in YAML 1.2"),
    "anchor and alias": (
        edited(
            "    members: 1\n    vmSize: Standard_L8s_v3\n    quotaBackendBytes: 8589934592",
            "    members: &m 1\n    vmSize: Standard_L8s_v3\n    quotaBackendBytes: 8589934592",
        ).replace("  supercluster:eventsEtcd:\n    members: 1", "  supercluster:eventsEtcd:\n    members: *m"),
        [],
        "no anchor (&m)",
    ),
    "tab indentation": (edited("    members: 1\n", "\tmembers: 1\n"), [], f"Pulumi.x.yaml:{ETCD_MEMBERS}:1"),
    "top level a list": ("- config\n- supercluster:clusterName: dev\n", [], "a mapping with a config: section"),
    "infinite quota": (edited("quotaBackendBytes: 8589934592", "quotaBackendBytes: .inf"), [], "a finite number"),
    "leading zero": (edited("maxNodes: 3", "maxNodes: 017"), [], "an integer without a leading zero"),
    "underscore digits": (edited("maxNodes: 3", "maxNodes: 1_0"), [], "digits without '_'"),
    "misspelt namespace": (
        edited("supercluster:addons:", "superclustr:addons:"),
        [],
        "superclustr:addons = {'balloons'",
    ),
    "key without namespace": (edited("supercluster:addons:", "addons:"), [], "a key of the form <namespace>:<name>"),
    "yes is not a boolean": (
        edited("infiniband: false", "infiniband: no"),
        [],
        "nodePools[1].infiniband = 'no': expected true or false",
    ),
    # YAML oddities in --config
    "index past the end": (None, ["nodePools[5].name=x"], f"expected an index from 0 to {DEV_POOLS}"),
    "negative index": (None, ["nodePools[-1].maxNodes=3"], f"an index from 0 to {DEV_POOLS} in nodePools"),
    "leading zero value": (None, ["etcd.members=03"], "etcd.members = '03'"),
    "appended pool is incomplete": (
        None,
        [f"nodePools[{DEV_POOLS}].name=cpu2"],
        f"nodePools[{DEV_POOLS}].role = <missing>",
    ),
    "unterminated quoted key": (None, ['nodePools[0].labels["a.io/b=c'], "--config = "),
    # reserved and non-private ranges
    "loopback address space": (None, ["network.addressSpace=127.0.0.0/8"], "(this touches loopback"),
    "everything as address space": (None, ["network.addressSpace=0.0.0.0/0"], "network.addressSpace = '0.0.0.0/0'"),
    "shared address space": (None, ["network.addressSpace=100.64.0.0/10"], "public or shared address space"),
    "class E address space": (None, ["network.addressSpace=240.0.0.0/4"], "class E"),
    "services on IMDS": (None, ["network.serviceCidr=169.254.0.0/16"], "Azure's instance metadata service"),
    "services on Azure DNS": (None, ["network.serviceCidr=168.63.128.0/22"], "168.63.129.16"),
    "multicast services": (None, ["network.serviceCidr=224.0.0.0/16"], "multicast"),
    "public hub": (None, ['network.hub["addressSpace"]=8.8.8.0/24'], "network.hub.addressSpace = '8.8.8.0/24'"),
    "node-local DNS on IMDS": (None, ["addons.nodeLocalDns.localIp=169.254.169.254"], "addons.nodeLocalDns.localIp"),
    # keys, versions and regions that cannot work
    "placeholder SSH key": (None, [f"adminSshPublicKey={OLD_PLACEHOLDER_KEY}"], "not a base64 SSH key blob"),
    "ECDSA SSH key": (None, [f"adminSshPublicKey={ECDSA_KEY}"], "Azure takes no other type"),
    "unreleased patch": (None, ["kubernetesVersion=1.33.99"], "kubernetesVersion = '1.33.99'"),
    "zero-padded patch": (None, ["kubernetesVersion=1.33.04"], "kubernetesVersion = '1.33.04'"),
    "display-name region": (None, ["azure-native:location=East US"], "azure-native:location = 'East US'"),
    "duration past Go's": (None, ["addons.clusterAutoscaler.scaleDownUnneededTime=9999999h"], "time.Duration"),
    # port clashes
    "exporter on kubelet's port": (None, ["addons.trafficAccounting.port=10250"], "10250 is also kubelet's"),
    "exporter on node-local DNS metrics": (None, ["addons.trafficAccounting.port=9253"], "node-local-dns"),
    "exporter on kube-proxy healthz": (None, ["addons.trafficAccounting.port=10256"], "kube-proxy's"),
    # impossible pools
    "no room for one pod per GPU": (None, ["nodePools[0].podIpsPerNode=8"], "expected at least 10"),
    "GPU pool fills up with DaemonSets": (None, ["nodePools[0].podIpsPerNode=4"], "expected at least 10"),
    "GPU pool on a CPU size": (None, ["nodePools[0].vmSize=Standard_D16ds_v5"], "expected a GPU size"),
    "UTF-16 stack file": ("utf-16", [], "expected a UTF-8 file"),
}


@pytest.mark.parametrize("name", CASES)
def test_hard_bad_input_exits_2_with_one_line(name, tmp_path):
    text, overrides, expected = CASES[name]
    out = tmp_path / "plan"
    args = [sys.executable, "-m", "plan", "--stack", "dev", "--out", str(out)]
    if text is not None:
        stack_file = tmp_path / "Pulumi.x.yaml"
        if text == "utf-16":
            stack_file.write_text(DEV, encoding="utf-16")
        else:
            stack_file.write_text(text)
        args += ["--config-file", str(stack_file)]
    for override in overrides:
        args += ["--config", override]
    result = subprocess.run(args, cwd=PROJECT_DIR, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: invalid config "), result.stderr
    assert "Traceback" not in result.stderr
    assert expected in result.stderr, result.stderr
    assert not out.exists(), "a refused config must leave no plan directory"


def test_there_are_about_35_cases_across_the_categories():
    assert len(CASES) >= 35
    assert sum(1 for _, (text, _, _) in CASES.items() if text is not None) >= 10  # in stack files
    assert sum(1 for _, (_, overrides, _) in CASES.items() if any(re.search(r"\[", o) for o in overrides)) >= 4
