"""Cluster-admin minted on demand, against dev's real apiserver: the deploy's exec credential as the real
kubectl (client-go) runs it, and an operator's break-glass kubeconfig. The control plane alone is booted.

Substituted: Azure Run Command. A stand-in ``az`` on the PATH answers ``az vmss list-instances`` with the
apiserver scale set's instance ids, runs the script ``az vmss run-command invoke`` would carry with bash on
this machine, the instance's CA paths pointed at the box's cluster CA, and answers in Run Command's JSON;
everything else (plan/credential.py, the signer, openssl, kubectl) is the real thing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from infra.config import naming
from infra.control_plane import access, pki
from plan.stackfile import PROJECT_DIR
from tests.e2e.cluster import Cluster, boot

pytestmark = pytest.mark.e2e

STAND_IN_AZ = """#!{python}
import json, subprocess, sys
args = sys.argv[1:]
if args[:2] == ["vmss", "list-instances"]:
    print(json.dumps({instances!r}))
    sys.exit(0)
script = args[args.index("--scripts") + 1]
script = script.replace({vm_cert!r}, {cert!r}).replace({vm_key!r}, {key!r})
done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
message = "Enable succeeded: \\n[stdout]\\n" + done.stdout + "\\n[stderr]\\n" + done.stderr
print(json.dumps({{"value": [{{"message": message}}]}}))
"""


@pytest.fixture(scope="module")
def control_plane(binaries: Path, tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    cluster = boot("dev", tmp_path_factory.mktemp("dev-break-glass"), binaries, with_nodes=False)
    yield cluster
    cluster.close()


@pytest.fixture(scope="module")
def stand_in_az(control_plane: Cluster) -> Path:
    folder = control_plane.workdir / "az-bin"
    folder.mkdir()
    cert, key = folder / "ca.crt", folder / "ca.key"
    cert.write_text(control_plane.pki.cluster_ca.cert_pem)
    key.write_text(control_plane.pki.cluster_ca.key_pem)
    os.chmod(key, 0o600)
    az = folder / "az"
    az.write_text(
        STAND_IN_AZ.format(
            python=sys.executable,
            vm_cert=pki.cert_path(pki.CLUSTER_CA),
            vm_key=pki.key_path(pki.CLUSTER_CA),
            cert=str(cert),
            key=str(key),
            instances=[str(i) for i in range(len(control_plane.plan.apiserver_instances()))],
        )
    )
    os.chmod(az, 0o755)
    return folder


def _whoami(cluster: Cluster, kubeconfig: Path) -> dict:
    answer = json.loads(cluster.kubectl("auth", "whoami", "-o", "json", kubeconfig=kubeconfig).stdout)
    return answer["status"]["userInfo"]


def test_the_deploy_kubeconfig_gets_a_masters_certificate_from_its_command(control_plane: Cluster, stand_in_az: Path):
    cluster = control_plane.spec.config.cluster_name
    (provider,) = [
        r
        for r in control_plane.plan.of_type("pulumi:providers:kubernetes")
        if r["name"] == f"{cluster}-control-plane-k8s"
    ]
    planned = yaml.safe_load(provider["inputs"]["kubeconfig"])["users"][0]["user"]["exec"]["args"]
    assert planned[-2:] == ["--scale-set", naming.apiserver_scale_set(cluster)]  # as the plan renders it
    group = naming.resource_group(cluster)
    config = yaml.safe_load(  # the same command, with the box's server and CA
        access.deploy_kubeconfig(
            control_plane.apiserver_url,
            control_plane.pki.cluster_ca.cert_pem,
            group,
            naming.apiserver_scale_set(cluster),
        )
    )
    entry = config["users"][0]["user"]["exec"]
    # The deploy runner's python3 is the project's virtualenv, started from the project root.
    entry["command"] = sys.executable
    entry["env"] = [
        {"name": "PATH", "value": f"{stand_in_az}:{os.environ['PATH']}"},
        {"name": "PYTHONPATH", "value": str(PROJECT_DIR)},
    ]
    kubeconfig = control_plane.workdir / "deploy.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    user = _whoami(control_plane, kubeconfig)
    assert user["username"] == access.DEPLOY_USER
    assert pki.SUPERUSER_GROUP in user["groups"]
    # And it may do what a deploy does: write RBAC from nothing.
    control_plane.kubectl(
        "create", "clusterrole", "break-glass-e2e", "--verb=get", "--resource=pods", kubeconfig=kubeconfig
    )


def test_an_operator_mints_a_one_hour_break_glass_kubeconfig_the_apiserver_names(
    control_plane: Cluster, stand_in_az: Path
):
    kubeconfig = control_plane.workdir / "alice.kubeconfig"
    cluster = control_plane.spec.config.cluster_name
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "plan.credential",
            "break-glass",
            "--name",
            "alice",
            "--server",
            control_plane.apiserver_url,
            "--resource-group",
            naming.resource_group(cluster),
            "--scale-set",
            naming.apiserver_scale_set(cluster),
            "--kubeconfig",
            str(kubeconfig),
        ],
        cwd=PROJECT_DIR,
        env={**os.environ, "PATH": f"{stand_in_az}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    user = _whoami(control_plane, kubeconfig)
    assert user["username"] == "break-glass:alice"
    assert pki.SUPERUSER_GROUP in user["groups"]
    assert control_plane.kubectl("get", "namespaces", kubeconfig=kubeconfig).returncode == 0
