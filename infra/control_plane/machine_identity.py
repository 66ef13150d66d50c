"""What makes an apiserver machine itself, decided on the machine at boot: its address and its serving
certificate.

Nothing per machine is rendered into its cloud-init: every apiserver receives the same files, so a
machine can be any instance of one model (a scale set's) and take whatever address its subnet hands
out. At boot the ``supercluster-apiserver-identity`` unit (``machine/control_plane/serving_identity.py``)
reads the address from the instance metadata service, as the nodes' boot programs read what Azure
knows about them (``machine/node/provider_id.py``), writes it to an EnvironmentFile that the three
component units read (``--advertise-address``, the controller-manager's and scheduler's
``--bind-address`` are ``${MACHINE_ADDRESS}``, which systemd replaces in ExecStart), and issues the
machine's serving certificate for it, signed with the cluster CA key the machine already fetches
(kube-controller-manager signs kubelet certificates with it). No apiserver serving certificate or key
is issued by the program, kept in its state or stored in Key Vault.
"""

from __future__ import annotations

import json

from infra.boot.cloudinit import CloudConfig
from infra.boot.secrets import add_boot_program
from infra.control_plane import paths, pki
from infra.network.addressing import CLUSTER_DOMAIN, AddressPlan

SCRIPT = "/usr/local/sbin/supercluster-apiserver-identity"
CONFIG = f"{paths.KUBERNETES_DIR}/apiserver-identity.json"
UNIT = "supercluster-apiserver-identity.service"
# Under /run: written again at every boot, never a value a previous boot (or another machine) decided.
ENVIRONMENT_FILE = "/run/kubernetes/machine.env"
ADDRESS_VARIABLE = "MACHINE_ADDRESS"
# What a rendered flag holds in place of the address: systemd replaces ``${NAME}`` inside a word of
# ExecStart with the variable's value from EnvironmentFile (systemd.service(5), "Command lines").
ADDRESS = "${" + ADDRESS_VARIABLE + "}"
SERVING_COMMON_NAME = "kube-apiserver"
# Validity of the serving certificate in days: the leaf validity of every other cluster certificate
# (kubeadm's one year, infra/control_plane/pki.py). It is issued again at every boot and every time the
# readiness gate re-runs (each renewal of the program's leaf certificates changes the secrets the gate
# follows), so it never outlives the certificates next to it.
VALIDITY_DAYS = pki.LEAF_VALIDITY_HOURS // 24


def serving_names(addresses: AddressPlan) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(dns_names, ip_addresses)`` every apiserver's certificate carries besides its own address: the
    load balancer, the ``kubernetes`` Service from inside the cluster, loopback (the co-located
    controller-manager and scheduler)."""
    dns = (
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        f"kubernetes.default.svc.{CLUSTER_DOMAIN}",
        "localhost",
    )
    return dns, (addresses.apiserver_lb_ip(), addresses.kubernetes_service_ip, "127.0.0.1")


def identity_config(addresses: AddressPlan) -> str:
    """The program's settings: file paths, the names, the validity. No secret (the CA key is a path)."""
    dns, ips = serving_names(addresses)
    document = {
        "ca_cert": pki.cert_path(pki.CLUSTER_CA),
        "ca_key": pki.key_path(pki.CLUSTER_CA),
        "cert": pki.cert_path(pki.APISERVER),
        "key": pki.key_path(pki.APISERVER),
        "common_name": SERVING_COMMON_NAME,
        "dns_names": list(dns),
        "ip_addresses": list(ips),
        "validity_days": VALIDITY_DAYS,
        "environment_file": ENVIRONMENT_FILE,
        "variable": ADDRESS_VARIABLE,
    }
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def add_identity_unit(cloud: CloudConfig, addresses: AddressPlan) -> None:
    """The program, its settings and the oneshot unit that runs it after the secrets are fetched (it
    signs with the fetched CA key) and before the components, which read ``ENVIRONMENT_FILE``."""
    add_boot_program(
        cloud,
        unit=UNIT,
        description="Decide this apiserver's address and issue its serving certificate (IMDS, cluster CA)",
        script=SCRIPT,
        source="control_plane/serving_identity.py",
        config=CONFIG,
        settings=identity_config(addresses),
        service={"Type": "oneshot", "RemainAfterExit": "true", "Restart": "on-failure", "RestartSec": "10"},
        compress_program=True,
        compress_settings=True,
    )
