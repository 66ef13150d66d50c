"""The whole cloud-init of the apiserver VMs: a pure function of the config and the address plan, the
same on every apiserver (nothing in it names the machine's address).

Order at boot: the Key Vault fetch (``infra.boot.secrets``) and the binary install run first, then
the machine's identity (its address from IMDS and its serving certificate,
``infra.control_plane.machine_identity``), then kube-apiserver, kube-controller-manager and
kube-scheduler. The components only ``Want`` the preparation units: if Key Vault is not reachable
yet (a fresh role assignment takes minutes to apply), the fetch keeps retrying and the components
keep restarting until their files are there, instead of failing once and staying down.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from infra.boot import systemd
from infra.boot.cloudinit import CloudConfig, custom_data, fingerprint, render
from infra.boot.secrets import FETCH_UNIT, add_secret_fetching
from infra.cluster.cluster_spec import ClusterSpec
from infra.config import naming
from infra.control_plane import (
    admission,
    apiserver,
    binaries,
    csr_approval,
    machine_identity,
    paths,
    pki,
    token_minting,
)
from infra.control_plane.controller_manager import controller_manager_flags
from infra.control_plane.kubeconfig import file_kubeconfig
from infra.control_plane.scheduler import render_scheduler_config, scheduler_flags
from infra.facts import roles
from infra.facts.endpoints import LOCAL_APISERVER

ZONES = ("1", "2", "3")
# Open files: every kubelet, kube-proxy and node agent holds connections to an apiserver.
APISERVER_OPEN_FILES = 1_048_576
# How long the rollout waits for one apiserver to answer /readyz before it stops (and fails the update).
READY_TIMEOUT_SECONDS = 30 * 60


@dataclass(frozen=True)
class ApiserverMachine:
    index: int
    vm_name: str
    ip: str
    zone: str
    cloud_init: str  # rendered #cloud-config, no secret in it

    @property
    def custom_data(self) -> str:
        return custom_data(self.cloud_init, self.vm_name)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.cloud_init)


# The control-plane units are the "pod specification files" of CIS 1.1.1-1.1.6: root only (systemd reads
# them as root).
UNIT_FILE_MODE = "0600"


def apiserver_machines(spec: ClusterSpec, etcd: Mapping[str, str]) -> tuple[ApiserverMachine, ...]:
    config, addresses = spec.config, spec.addresses
    cloud_init = render(apiserver_cloud_config(spec, etcd))  # the same on every apiserver: rendered once
    return tuple(
        ApiserverMachine(
            index=index,
            vm_name=naming.apiserver(config.cluster_name, index),
            ip=ip,
            zone=ZONES[index % len(ZONES)],
            cloud_init=cloud_init,
        )
        for index, ip in enumerate(addresses.apiserver_ips(config.control_plane.apiservers))
    )


def shared_files(spec: ClusterSpec) -> tuple[tuple[str, str, str], ...]:
    """``(path, content, permissions)`` of every file that is the same on each apiserver."""
    config = spec.config
    files = [
        (paths.INSTALL_SCRIPT, binaries.verify_script(config.kubernetes_version), "0755"),
        (
            f"/etc/systemd/system/{paths.INSTALL_UNIT}",
            systemd.unit(
                "Check the pinned control-plane binaries (from the machine image)",
                [paths.INSTALL_SCRIPT],
                service={"Type": "oneshot", "RemainAfterExit": "true", "Restart": "no"},
            ),
            "0644",
        ),
        (paths.AUDIT_POLICY, apiserver.audit_policy(), "0600"),
        (paths.AUTHENTICATION_CONFIG, apiserver.authentication_config(config.people_sign_in), "0600"),
        (paths.ADMISSION_CONFIG, admission.admission_configuration(config), "0600"),
        (paths.SCHEDULER_CONFIG, render_scheduler_config(), "0600"),
    ]
    kubeconfigs = (
        (paths.CONTROLLER_MANAGER_KUBECONFIG, pki.CONTROLLER_MANAGER, pki.CONTROLLER_MANAGER_USER),
        (paths.SCHEDULER_KUBECONFIG, pki.SCHEDULER, pki.SCHEDULER_USER),
    )
    for path, cert_key, user in kubeconfigs:
        files.append(
            (
                path,
                file_kubeconfig(user, pki.cert_path(pki.CLUSTER_CA), pki.cert_path(cert_key), pki.key_path(cert_key)),
                "0600",
            )
        )
    return tuple(files)


def _component_unit(
    description: str,
    binary: str,
    flags: dict[str, Any],
    *,
    after: Sequence[str] = (),
    service: dict[str, Any] | None = None,
) -> str:
    prepared = [FETCH_UNIT, paths.INSTALL_UNIT, machine_identity.UNIT]
    return systemd.unit(
        description,
        [f"{paths.BIN_DIR}/{binary}", *systemd.flags(flags)],
        after=["network-online.target", *prepared, *after],
        wants=["network-online.target", *prepared],
        # The machine's address, decided at boot (machine_identity.ADDRESS in the flags).
        service={"EnvironmentFile": machine_identity.ENVIRONMENT_FILE, **(service or {})},
    )


def _wait_for_local_apiserver() -> str:
    """``ExecStartPre`` of the controller-manager and the scheduler: until the VM's own apiserver, the
    only one they talk to (their kubeconfigs), answers /readyz. Started with it, they exited at once
    (its RBAC not loaded yet: "forbidden") on every boot, replacement and rollout, and Restart= hid it.
    systemd's start timeout (TimeoutStartSec, 90 s by default) bounds the wait; Restart= then tries again."""
    check = f"curl -fs --max-time 5 --cacert {pki.cert_path(pki.CLUSTER_CA)} {LOCAL_APISERVER}/readyz >/dev/null"
    return "/bin/sh -c " + shlex.quote(f"until {check}; do sleep 2; done")


def apiserver_cloud_config(spec: ClusterSpec, etcd: Mapping[str, str]) -> CloudConfig:
    """Every apiserver's cloud-init: the ``shared_files``, the identity unit and the component units,
    whose flags name the machine's address as ``machine_identity.ADDRESS``."""
    config, addresses = spec.config, spec.addresses
    address = machine_identity.ADDRESS
    cloud = CloudConfig()
    cloud.packages.extend(binaries.PACKAGES)
    for path, content, permissions in shared_files(spec):
        # The programs (executed only, read in the plan's files) compressed: customData is bounded.
        cloud.add(path, content, permissions=permissions, compressed=permissions == "0755")
    machine_identity.add_identity_unit(cloud, addresses)
    csr_approval.add_approver_unit(cloud, config)
    token_minting.add_minter_unit(cloud, config)

    cloud.add(
        f"/etc/systemd/system/{paths.APISERVER_UNIT}",
        _component_unit(
            "Kubernetes API server",
            "kube-apiserver",
            apiserver.apiserver_flags(config, addresses, address, etcd),
            service={
                "LimitNOFILE": str(APISERVER_OPEN_FILES),
                "LogsDirectory": paths.AUDIT_LOG_DIR.removeprefix("/var/log/"),
                "LogsDirectoryMode": "0700",
            },
        ),
        permissions=UNIT_FILE_MODE,
    )
    cloud.add(
        f"/etc/systemd/system/{paths.CONTROLLER_MANAGER_UNIT}",
        _component_unit(
            "Kubernetes controller manager",
            "kube-controller-manager",
            controller_manager_flags(config, addresses, address),
            after=[paths.APISERVER_UNIT],
            service={"ExecStartPre": _wait_for_local_apiserver()},
        ),
        permissions=UNIT_FILE_MODE,
    )
    cloud.add(
        f"/etc/systemd/system/{paths.SCHEDULER_UNIT}",
        _component_unit(
            "Kubernetes scheduler (scheduler-plugins build: bin-packing and gang profiles)",
            "kube-scheduler",
            scheduler_flags(address),
            after=[paths.APISERVER_UNIT],
            service={"ExecStartPre": _wait_for_local_apiserver()},
        ),
        permissions=UNIT_FILE_MODE,
    )

    # What the secret fetch must precede, in the order systemd starts them.
    units = [paths.INSTALL_UNIT, machine_identity.UNIT, *paths.COMPONENT_UNITS, csr_approval.UNIT]
    cloud.runcmd.append(["systemctl", "daemon-reload"])
    add_secret_fetching(
        cloud,
        naming.key_vault(config.cluster_name),
        pki.apiserver_secret_files(pki.certificates()),
        before=units,
        identity=naming.role_identity_below_subscription(config.cluster_name, roles.APISERVER.identity),
    )
    cloud.runcmd.append(["systemctl", "enable", "--now", *units])
    return cloud


def readiness_command() -> str:
    """What the rollout runs on an apiserver VM (as a VM extension) before moving to the next one:
    wait for cloud-init to finish, re-fetch the secrets, issue the serving certificate again and restart
    the components (so a rotated certificate takes effect), then wait until the local apiserver answers
    /readyz."""
    attempts = READY_TIMEOUT_SECONDS // 5
    units = " ".join(paths.COMPONENT_UNITS)
    script = (
        "cloud-init status --wait >/dev/null || true; "
        f"systemctl restart {FETCH_UNIT}; "
        f"systemctl restart {machine_identity.UNIT}; "
        f"systemctl try-restart {units}; "
        f"for i in $(seq 1 {attempts}); do "
        f"curl -fsk --max-time 5 {LOCAL_APISERVER}/readyz >/dev/null && exit 0; "
        "sleep 5; done; "
        f"echo 'kube-apiserver not ready after {READY_TIMEOUT_SECONDS}s' >&2; exit 1"
    )
    return "/bin/bash -c " + shlex.quote(script)
