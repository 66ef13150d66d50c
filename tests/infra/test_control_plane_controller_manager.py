"""kube-controller-manager as rendered into an apiserver VM's cloud-init."""

from __future__ import annotations

import pytest

from infra.control_plane import machine_identity, paths
from tests.helpers import load_yaml
from tests.infra.control_plane_files import component_flags, files, machines

EXPECTED = {
    "allocate-node-cidrs": "false",  # pods take VNet IPs, not node podCIDRs
    "authentication-kubeconfig": "/etc/kubernetes/controller-manager.conf",
    "authorization-kubeconfig": "/etc/kubernetes/controller-manager.conf",
    "cluster-name": "prod",
    "cluster-signing-cert-file": "/etc/kubernetes/pki/ca.crt",
    "cluster-signing-key-file": "/etc/kubernetes/pki/ca.key",
    "cluster-signing-duration": "720h",  # 30 days: a stolen node certificate lapses within a month (kubelet rotates it)
    "controllers": "*,tokencleaner",  # csrsigning and csrapproving are in "*"
    "endpoint-updates-batch-period": "500ms",
    "endpointslice-updates-batch-period": "500ms",
    "kube-api-burst": "800",
    "kube-api-qps": "600",
    "kubeconfig": "/etc/kubernetes/controller-manager.conf",
    "leader-elect": "true",
    "leader-elect-lease-duration": "30s",  # upstream 15s
    "leader-elect-renew-deadline": "20s",  # upstream 10s: longer than an etcd election's write stall
    "leader-elect-retry-period": "2s",
    "profiling": "false",
    "root-ca-file": "/etc/kubernetes/pki/ca.crt",
    "service-account-private-key-file": "/etc/kubernetes/pki/sa.key",
    "service-cluster-ip-range": "172.20.0.0/16",
    "terminated-pod-gc-threshold": "12500",
    "use-service-account-credentials": "true",
    "feature-gates": None,  # RotateKubeletServerCertificate stays at its default (on)
}


@pytest.fixture(scope="module")
def flags() -> dict[str, str]:
    return component_flags(machines("prod")[0], paths.CONTROLLER_MANAGER_UNIT)


@pytest.mark.parametrize("flag,expected", EXPECTED.items(), ids=EXPECTED.keys())
def test_controller_manager_flag(flags, flag, expected):
    assert flags.get(flag) == expected


def test_each_controller_manager_serves_on_its_own_vm_address_not_loopback_or_every_interface():
    """The control-plane Prometheus shard scrapes SECURE_PORT at each apiserver VM's address, which the machine
    reads from IMDS at boot (tests/e2e/test_dev_cluster.py proves it is answered there)."""
    for machine in machines("prod"):
        flags = component_flags(machine, paths.CONTROLLER_MANAGER_UNIT)
        assert flags["bind-address"] == machine_identity.ADDRESS, machine.vm_name
        assert "secure-port" not in flags  # the default, SECURE_PORT


def test_kubeconfig_talks_to_the_local_apiserver_with_file_credentials(flags):
    kubeconfig = load_yaml(files(machines("prod")[0])[flags["kubeconfig"]])
    (cluster,) = kubeconfig["clusters"]
    (user,) = kubeconfig["users"]
    assert cluster["cluster"] == {
        "server": "https://127.0.0.1:6443",
        "certificate-authority": "/etc/kubernetes/pki/ca.crt",
    }
    assert user == {
        "name": "system:kube-controller-manager",
        "user": {
            "client-certificate": "/etc/kubernetes/pki/controller-manager.crt",
            "client-key": "/etc/kubernetes/pki/controller-manager.key",
        },
    }
