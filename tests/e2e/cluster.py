"""Boots an offline plan's rendered cluster on the real upstream binaries: the cluster in a box.

Order, as on Azure: every machine gets its rendered files and the secrets its rendered fetch
script names (from the test PKI, ``tests/e2e/pki.py``); etcd members start from their rendered
``etcd.yaml``; apiservers, controller-managers and schedulers start from their rendered units'
``ExecStart`` lines; the load balancer host forwards the plan's frontend address to the
apiservers that pass its ``/readyz`` probe; every object under ``files/k8s`` is applied with
server-side apply (CRDs first), as the kubernetes provider would; then nodes join through their
rendered bootstrap kubeconfig.

What is substituted, and why (docs/cluster-in-a-box.md says the same):
- systemd: units are not run by systemd (there is none in the sandbox); their ``ExecStart`` runs
  verbatim in the machine's namespace, with ``RuntimeDirectory``/``LogsDirectory`` created as
  systemd would. ``User=etcd`` is not applied (everything runs as root).
- Key Vault: the fetch script itself is not run (it needs Azure); each of its ``fetch`` lines is
  honoured by writing that secret, from the test PKI, at that path with that mode. (One test runs a node's
  against the IMDS stand-in as Key Vault: tests/e2e/test_node_labels.py.)
- IMDS: a stand-in at its platform address (tests/e2e/imds.py) answers each machine about itself; an
  apiserver's identity unit (its address and serving certificate) runs for real against it, and the
  harness fills a unit's ``${VAR}`` from its ``EnvironmentFile`` as systemd would.
- ``etcd-member prepare``: not run (it asks Azure Blob storage whether snapshots exist); on a
  first bootstrap it starts etcd from the rendered config unchanged, which is what happens here.
  The member tool runs for real in tests/infra/test_etcd_real.py.
- kubelet: ``nodesim`` (tests/e2e/go/kubernetes/cmd/nodesim) takes the rendered kubelet
  ``ExecStart`` flags and files, bootstraps its client certificate with the kubelet's own
  bootstrap code through the rendered bootstrap kubeconfig and token, and registers the node with
  the rendered labels and taints. A real kubelet cannot run here: the rendered config uses the
  systemd cgroup driver (no systemd), Azure CNI needs Azure's NIC metadata, and GPU nodes need
  GPUs. Pods bound to a node are marked running by nodesim; no container runs.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infra.addons import monitoring
from infra.addons.k8s import object_key
from infra.addons.monitoring import alertmanager, credential
from infra.addons.shared_names import SYSTEM_NAMESPACE
from infra.catalog.vm_sizes import VM_SIZES
from infra.cluster.cluster_spec import ClusterSpec
from infra.control_plane import paths
from infra.control_plane import pki as cluster_pki
from infra.control_plane.csr_approval import CONFIG as CSR_APPROVER_CONFIG
from infra.control_plane.csr_approval import UNIT as CSR_APPROVER_UNIT
from infra.control_plane.machine_identity import UNIT as IDENTITY_UNIT
from infra.control_plane.paths import APISERVER_UNIT, COMPONENT_UNITS
from infra.control_plane.token_minting import CONFIG as TOKEN_MINTER_CONFIG
from infra.control_plane.token_minting import UNIT as TOKEN_MINTER_UNIT
from infra.etcd.member_machine import ETCD_UNIT
from infra.etcd.spec import CLIENT_PORT, EVENTS, MAIN, etcd_cluster_spec
from infra.facts import labels
from infra.facts.labels import GPU_RESOURCE, RDMA_RESOURCE
from infra.node import kubelet
from infra.node.cni import IMDS_IP
from plan.stackfile import PROJECT_DIR, stack_cluster_spec
from tests.e2e import attestation, dns, runtime
from tests.e2e.attestation import Attestation
from tests.e2e.hosts import Host, Process, TestNetwork, wait_for
from tests.e2e.images import BoxImages, build_images
from tests.e2e.pki import TestPki, issue_pki
from tests.e2e.plan_machines import Machine, Plan

# The units' names, from the renderers that write them.
KUBELET_UNIT = kubelet.UNIT
JOIN_UNIT = kubelet.JOIN_UNIT
CONTROL_PLANE_UNITS = COMPONENT_UNITS
EFFECTIVE_ETCD_CONFIG = "run/etcd/etcd.yaml"
RENDERED_ETCD_CONFIG = "etc/etcd/etcd.yaml"
# Folders of a machine's rendered files that the harness installs (the rest is boot plumbing).
INSTALLED = ("etc/kubernetes", "etc/etcd", "etc/supercluster", "usr/local/sbin")
FIELD_MANAGER = "pulumi-kubernetes"  # what the kubernetes provider applies with
BOOT_TIMEOUT = 180
# A node's join: its CSR approved and signed (seconds; minutes on a loaded CI machine).
JOIN_TIMEOUT = 180


def plan_stack(
    stack: str, out: Path, overrides: list[str], last_deploy: Path | None = None, apiserver_rollout: Path | None = None
) -> Plan:
    """Writes the offline plan of ``stack`` (the same CLI a user runs) and loads it. With ``last_deploy`` (an
    earlier plan's folder) it is the next deploy: the program reads that plan's outputs as its last deploy's
    (``--diff``), and the plan diff must show no danger (exit 0 or 1, not 4). ``apiserver_rollout``: where the
    apiserver scale set's rolling upgrade stands, as the deploy reads it from Azure (``--apiserver-rollout``)."""
    argv = [sys.executable, "-m", "plan", "--stack", stack, "--out", str(out)]
    for override in overrides:
        argv += ["--config", override]
    if last_deploy is not None:
        argv += ["--diff", str(last_deploy)]
    if apiserver_rollout is not None:
        argv += ["--apiserver-rollout", str(apiserver_rollout)]
    result = subprocess.run(argv, capture_output=True, text=True, cwd=PROJECT_DIR, timeout=300)
    assert result.returncode in ((0,) if last_deploy is None else (0, 1)), (
        f"python -m plan --stack {stack} exited {result.returncode}:\n{(result.stderr or result.stdout)[-3000:]}"
    )
    return Plan.load(out)


@dataclass
class Node:
    machine: Machine
    host: Host
    process: Process
    pool: str | None  # None for a NAT host


@dataclass
class Cluster:
    stack: str
    spec: ClusterSpec
    plan: Plan
    network: TestNetwork
    pki: TestPki
    admin: Host
    workdir: Path
    attestation: Attestation  # Azure's word on which VM is which (tests/e2e/attestation.py)
    etcd: dict[str, list[tuple[Machine, Host, Process]]] = field(default_factory=dict)
    control_plane: list[tuple[Machine, Host, dict[str, Process]]] = field(default_factory=list)
    load_balancer: Process | None = None
    nodes: list[Node] = field(default_factory=list)
    real_nodes: list[runtime.RealNode] = field(default_factory=list)
    box_images: BoxImages | None = None  # what real nodes run (tests/e2e/images.py)

    # ------------------------------------------------------------------ talking to it

    @property
    def apiserver_url(self) -> str:
        frontend = self.plan.load_balancer("control-plane-lb")["frontendIPConfigurations"][0]
        return f"https://{frontend['privateIPAddress']}:6443"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "admin.conf"

    def kubectl(
        self,
        *args: str,
        timeout: float = 60,
        check: bool = True,
        input: str | None = None,
        kubeconfig: Path | None = None,
    ) -> subprocess.CompletedProcess:
        return self.network.run(
            self.admin,
            ["/usr/local/bin/kubectl", f"--kubeconfig={kubeconfig or self.kubeconfig}", *args],
            timeout=timeout,
            check=check,
            input=input,
        )

    def create_probe_event(self, timeout: float = 60) -> str:
        """Creates an Event in ``default`` through the apiservers; returns the etcd key it is stored under.
        Raises RuntimeError when the API refuses it or has not answered within ``timeout`` seconds."""
        name = f"box-{uuid.uuid4().hex[:8]}"
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": "default"},
            "involvedObject": {"kind": "Namespace", "name": "default"},
            "reason": "ClusterInABox",
            "message": "where does this land",
            "type": "Normal",
        }
        self.kubectl(
            "create", "-f", "-", f"--request-timeout={timeout:g}s", input=yaml.safe_dump(event), timeout=timeout + 30
        )
        return f"/registry/events/default/{name}"

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", "-o", "json", *args).stdout)

    def raw(self, path: str, anonymous: bool = False, url: str | None = None, timeout: float = 10) -> tuple[int, str]:
        """``(HTTP status, body)`` of a GET, as the admin or with no credentials at all (status 0: no answer
        within ``timeout`` seconds)."""
        argv = [
            "curl",
            "-s",
            "-o",
            "-",
            "-w",
            "\n%{http_code}",
            "--max-time",
            f"{timeout:g}",
            "--cacert",
            str(self.workdir / "ca.crt"),
        ]
        if not anonymous:
            argv += ["--cert", str(self.workdir / "admin.crt"), "--key", str(self.workdir / "admin.key")]
        result = self.network.run(
            self.admin, [*argv, (url or self.apiserver_url) + path], check=False, timeout=timeout + 10
        )
        body, _, status = result.stdout.rpartition("\n")
        return int(status or 0), body

    def etcdctl(
        self,
        role: str,
        *args: str,
        endpoints: list[str] | None = None,
        cacert: str | None = None,
        timeout: float = 30,
        check: bool = True,
    ) -> subprocess.CompletedProcess:
        """etcdctl on the first member of ``role``, with that member's own client certificate (verifying the
        servers with ``cacert``, by default the CAs that member's client port trusts)."""
        machine, host, _ = self.etcd[role][0]
        config = yaml.safe_load((machine.files / RENDERED_ETCD_CONFIG).read_text())
        tls = config["client-transport-security"]
        urls = endpoints or [m.ip for m, _, _ in self.etcd[role]]
        urls = [u if u.startswith("https://") else f"https://{u}:{CLIENT_PORT}" for u in urls]
        return self.network.run(
            host,
            [
                "/usr/local/bin/etcdctl",
                f"--endpoints={','.join(urls)}",
                f"--cacert={cacert or tls['trusted-ca-file']}",
                f"--cert={tls['cert-file']}",
                f"--key={tls['key-file']}",
                "--command-timeout=10s",
                *args,
            ],
            timeout=timeout,
            check=check,
        )

    def describe(self) -> str:
        """The last lines of every process's log, and with real nodes where each pod is and the latest
        events (a pod Pending on a taint or stuck in its sandbox): what a failed wait prints."""
        parts = []
        if self.real_nodes:
            for what in (["get", "pods", "-A", "-o", "wide"], ["get", "events", "-A", "--sort-by=.lastTimestamp"]):
                try:
                    answer = self.kubectl(*what, check=False, timeout=20)
                except subprocess.TimeoutExpired:
                    continue
                lines = (answer.stdout or answer.stderr).splitlines()
                parts.append(f"--- kubectl {' '.join(what)}:\n    " + "\n    ".join(lines[-40:]))
        for process in self.network.processes:
            tail = "\n    ".join(process.output().splitlines()[-8:])
            state = "running" if process.alive() else f"exited {process.popen.returncode}"
            parts.append(f"--- {process.host.name} {process.name} ({state}):\n    {tail}")
        return "\n".join(parts)

    def close(self) -> None:
        for node in self.real_nodes:  # first: its processes are found by its namespace, which close() deletes
            runtime.stop_real_node(node)
        self.network.close()


# ---------------------------------------------------------------------- booting


def boot(
    stack: str,
    workdir: Path,
    binaries: Path,
    *,
    overrides: list[str] = (),
    nodes_per_pool: int | Mapping[str, int] | None = None,
    nodes_per_shard: int | None = None,
    with_nodes: bool = True,
    real_nodes: bool | Collection[str] = False,
    prepare: Callable[[Cluster], None] | None = None,
) -> Cluster:
    """Plans ``stack``, boots its control plane, applies its objects and (``with_nodes``) joins nodes;
    with ``real_nodes`` (True: every node; a collection: the first node of each pool it names), those
    nodes run the real kubelet and containerd, the others nodesim. ``prepare`` runs once every machine's
    files are installed and before anything starts: a test's substitution in a rendered file (named in its
    docstring and in docs/cluster-in-a-box.md).

    On any failure everything started so far is stopped before the error propagates.
    """
    if (workdir / "machines").exists():
        # Machines keep their state (etcd data) in their folders: a second boot there would start on
        # the first one's data with new keys and fail in confusing ways.
        raise FileExistsError(f"{workdir} already holds a booted cluster; boot into an empty folder")
    overrides = list(overrides)
    plan = plan_stack(stack, workdir / "plan", overrides)
    spec = stack_cluster_spec(stack, overrides)
    config = spec.config
    members = {role: list(etcd_cluster_spec(spec, role).members) for role in (MAIN, EVENTS)}
    token_id = _bootstrap_token_id(plan)
    pki = issue_pki(
        config.cluster_name,
        cluster_pki.certificates(),
        members,
        token_id,
    )
    _check_vault(plan, pki)
    prefix_length = config.network.address_space.prefixlen
    network = TestNetwork(f"sc{os.getpid() % 100000}-{stack}", workdir, binaries).open()
    cluster = None
    try:
        admin = network.add_host("operator", [f"{_operator_ip(spec)}/{prefix_length}"])
        attested = Attestation(attestation.directory_of(network.workdir))
        runtime.start_imds(network, config.network.address_space)
        cluster = Cluster(stack, spec, plan, network, pki, admin, workdir, attested)
        _write_admin_credentials(cluster)
        vms = plan.vms() + plan.apiserver_instances()
        etcd_roles = {m.name: role for role in (MAIN, EVENTS) for m in etcd_cluster_spec(spec, role).members}
        for machine in vms:
            host = network.add_host(machine.name, [f"{machine.ip}/{prefix_length}"])
            install(machine, host, pki)
            attested.carry(machine)  # the identities the plan attaches to it: IMDS's tokens are for those only
            if machine.name in etcd_roles:
                cluster.etcd.setdefault(etcd_roles[machine.name], []).append((machine, host, None))
        if prepare is not None:
            prepare(cluster)
        _start_etcd(cluster)
        _start_control_plane(cluster)
        apply_objects(cluster)
        if with_nodes:
            join_nodes(cluster, nodes_per_pool, nodes_per_shard, real_nodes)
        return cluster
    except BaseException:
        if cluster is None:
            network.close()
        else:
            cluster.close()
        raise


def _bootstrap_token_id(plan: Plan) -> str:
    for _, document in plan.kubernetes_objects():
        if document.get("type") == "bootstrap.kubernetes.io/token":
            return document["metadata"]["name"].removeprefix("bootstrap-token-")
    raise AssertionError("the plan has no bootstrap token Secret")


def _check_vault(plan: Plan, pki: TestPki) -> None:
    """Every secret the plan puts in Key Vault is issued by the test PKI, and every secret a machine
    fetches is one the plan puts there: a renamed secret on either side fails here."""
    declared = plan.key_vault_secret_names()
    missing = declared - set(pki.vault)
    assert not missing, f"Key Vault secrets of the plan that the test PKI does not issue: {sorted(missing)}"
    for machine in plan.vms() + plan.apiserver_instances()[:1] + [s.instance(0) for s in plan.scale_sets()]:
        fetched = {name for name, _, _ in machine.fetched_secrets()}
        assert fetched <= declared, f"{machine.name} fetches secrets no resource declares: {sorted(fetched - declared)}"


def _operator_ip(spec: ClusterSpec) -> str:
    """The test's operator host: the last address of the cluster's address space, used by no subnet."""
    return str(spec.config.network.address_space.broadcast_address - 1)


def _write_admin_credentials(cluster: Cluster) -> None:
    (cluster.workdir / "ca.crt").write_text(cluster.pki.cluster_ca.cert_pem)
    (cluster.workdir / "admin.crt").write_text(cluster.pki.admin.cert_pem)
    (cluster.workdir / "admin.key").write_text(cluster.pki.admin.key_pem)
    os.chmod(cluster.workdir / "admin.key", 0o600)
    cluster.kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "box",
                        "cluster": {
                            "server": cluster.apiserver_url,
                            "certificate-authority": str(cluster.workdir / "ca.crt"),
                        },
                    }
                ],
                "users": [
                    {
                        "name": "admin",
                        "user": {
                            "client-certificate": str(cluster.workdir / "admin.crt"),
                            "client-key": str(cluster.workdir / "admin.key"),
                        },
                    }
                ],
                "contexts": [{"name": "box", "context": {"cluster": "box", "user": "admin"}}],
                "current-context": "box",
            }
        )
    )


def install(machine: Machine, host: Host, pki: TestPki) -> None:
    """The machine's rendered files at their paths, its fetched secrets, and the directories its
    units ask systemd for."""
    for relative in INSTALLED:
        source = machine.files / relative
        if source.is_dir():
            shutil.copytree(source, host.root / relative, dirs_exist_ok=True, symlinks=False)
    # The modes cloud-init gives them (the plan's copies carry none): kubelet runs its credential
    # provider from usr/local/sbin and refuses one that is not executable.
    for entry in yaml.safe_load((machine.files / "cloud-init.yaml").read_text()).get("write_files", []):
        target = host.root / entry["path"].lstrip("/")
        if target.is_file():
            os.chmod(target, int(entry["permissions"], 8))
    for name, path, mode in machine.fetched_secrets():
        target = host.root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(pki.vault[name])
        os.chmod(target, int(mode, 8))
    units = machine.files / "etc/systemd/system"
    for unit_file in sorted(units.glob("*.service")) if units.is_dir() else []:
        unit = machine.unit(unit_file.name)
        for key, base in (("RuntimeDirectory", "run"), ("LogsDirectory", "var/log"), ("StateDirectory", "var/lib")):
            for value in unit.get("Service", key):
                for directory in value.split():
                    (host.root / base / directory).mkdir(parents=True, exist_ok=True)


def start_unit(
    cluster: Cluster, machine: Machine, host: Host, unit_name: str, argv: list[str] | None = None
) -> Process:
    """Runs a rendered unit's ``ExecStart`` (or ``argv`` standing in for it) on ``host``, restarted as
    its ``Restart=``/``RestartSec=`` say. A control-plane unit's ``ExecStartPre`` (the wait for its
    apiserver) runs before each start, as systemd runs it; etcd's (the member tool) is stood in for by
    the boot (``_start_etcd``) or run by the test that exercises it."""
    unit = machine.unit(unit_name)
    pre = (
        [shlex.split(line) for line in unit.get("Service", "ExecStartPre")] if unit_name in CONTROL_PLANE_UNITS else []
    )
    return cluster.network.start(
        host,
        unit_name.removesuffix(".service"),
        argv or unit_argv(machine, host, unit_name),
        restart_sec=unit.restart_sec,
        pre=pre,
    )


def unit_argv(machine: Machine, host: Host, unit_name: str) -> list[str]:
    """The unit's ``ExecStart`` as systemd runs it: each ``${NAME}`` replaced by its value from the unit's
    ``EnvironmentFile`` (on the machine; a missing file fails the start unless its name starts with ``-``)."""
    unit = machine.unit(unit_name)
    values: dict[str, str] = {}
    for name in unit.get("Service", "EnvironmentFile"):
        path = host.root / name.removeprefix("-").lstrip("/")
        if not path.exists() and name.startswith("-"):
            continue
        for line in path.read_text().splitlines():
            key, equals, value = line.partition("=")
            if equals and not key.lstrip().startswith("#"):
                values[key.strip()] = value.strip()
    argv = unit.exec_start
    for key, value in values.items():
        argv = [word.replace(f"${{{key}}}", value) for word in argv]
    return argv


def start_control_plane_machine(cluster: Cluster, machine: Machine, host: Host) -> dict[str, Process]:
    """An apiserver machine's boot, in systemd's order: its identity unit (the address from IMDS, the serving
    certificate) to completion, then its component units, the node certificates' approver and the bootstrap-token
    minter. IMDS is on-link, as Azure's DHCP routes it."""
    cluster.network.run(host, ["ip", "route", "replace", f"{IMDS_IP}/32", "dev", "eth0"])
    cluster.attestation.carry(machine)  # a replaced instance carries the scale set's identity too
    cluster.network.run(host, machine.unit(IDENTITY_UNIT).exec_start, timeout=120)
    # The approver trusts the box's attestation root for Azure's and asks the stand-in as Resource Manager
    # (tests/e2e/attestation.py); its other settings are the rendered ones.
    settings = host.root / CSR_APPROVER_CONFIG.lstrip("/")
    root = f"{paths.KUBERNETES_DIR}/box-attestation-root.crt"
    (host.root / root.lstrip("/")).write_text(cluster.attestation.root.cert_pem)
    settings.write_text(json.dumps(cluster.attestation.approver_config(json.loads(settings.read_text()), root)))
    # The token minter writes to the stand-in as Key Vault, through the same root.
    minter = host.root / TOKEN_MINTER_CONFIG.lstrip("/")
    minter.write_text(json.dumps(cluster.attestation.minter_config(json.loads(minter.read_text()), root)))
    units = (*CONTROL_PLANE_UNITS, CSR_APPROVER_UNIT, TOKEN_MINTER_UNIT)
    return {unit: start_unit(cluster, machine, host, unit) for unit in units}


def _start_etcd(cluster: Cluster) -> None:
    for role, members in cluster.etcd.items():
        started = []
        for machine, host, _ in members:
            # What `etcd-member prepare` writes on a first bootstrap: the rendered config unchanged.
            shutil.copyfile(host.root / RENDERED_ETCD_CONFIG, host.root / EFFECTIVE_ETCD_CONFIG)
            process = start_unit(cluster, machine, host, ETCD_UNIT)
            started.append((machine, host, process))
        cluster.etcd[role] = started
    for role in cluster.etcd:
        wait_for(
            f"the {role} etcd cluster to be healthy",
            lambda role=role: cluster.etcdctl(role, "endpoint", "health", check=False).returncode == 0,
            timeout=BOOT_TIMEOUT,
            on_timeout=cluster.describe,
        )


def _start_control_plane(cluster: Cluster) -> None:
    machines = [
        (m, cluster.network.hosts[m.name])
        for m in cluster.plan.vms() + cluster.plan.apiserver_instances()
        if m.has_unit(APISERVER_UNIT)
    ]
    for machine, host in machines:
        cluster.control_plane.append((machine, host, start_control_plane_machine(cluster, machine, host)))
    lb = cluster.plan.load_balancer("control-plane-lb")
    frontend = lb["frontendIPConfigurations"][0]["privateIPAddress"]
    probe = lb["probes"][0]
    port = lb["loadBalancingRules"][0]["backendPort"]
    prefix_length = cluster.spec.config.network.address_space.prefixlen
    lb_host = cluster.network.add_host("apiserver-load-balancer", [f"{frontend}/{prefix_length}"])
    cluster.load_balancer = cluster.network.start(
        lb_host,
        "load-balancer",
        [
            sys.executable,
            str(Path(__file__).with_name("load_balancer.py")),
            f"{frontend}:{lb['loadBalancingRules'][0]['frontendPort']}",
            probe["requestPath"],
            str(probe["intervalInSeconds"]),
            str(probe["probeThreshold"]),
            *[f"{m.ip}:{port}" for m, _ in machines],
        ],
    )
    wait_for(
        "every apiserver to answer /readyz",
        lambda: all(cluster.raw("/readyz", url=f"https://{m.ip}:{port}")[0] == 200 for m, _ in machines),
        timeout=BOOT_TIMEOUT,
        interval=1,
        on_timeout=cluster.describe,
    )
    wait_for(
        "the load balancer to answer /readyz",
        lambda: cluster.raw("/readyz")[0] == 200,
        timeout=60,
        on_timeout=cluster.describe,
    )


# ---------------------------------------------------------------------- objects


def objects_in_apply_order(plan: Plan) -> list[tuple[Path, dict[str, Any]]]:
    """CRDs, then namespaces, then everything else, as the provider's dependency order would."""
    rank = {"CustomResourceDefinition": 0, "Namespace": 1}
    return sorted(plan.kubernetes_objects(), key=lambda item: rank.get(item[1]["kind"], 2))


def apply_objects(cluster: Cluster) -> list[str]:
    """Server-side applies every object of ``files/k8s``; returns kubectl's lines. The values the plan
    masks, the bootstrap token's and the monitoring credentials' ``stringData``, are filled from the test PKI."""
    documents = []
    for path, document in objects_in_apply_order(cluster.plan):
        if document.get("type") == "bootstrap.kubernetes.io/token":
            document = {**document, "stringData": cluster.pki.bootstrap_token_data()}
        if object_key(document) == ("Secret", monitoring.NAMESPACE, credential.SECRET):
            # The generation is the one key the plan names beside the masked values (credential.rotation_key).
            (rotation,) = [k for k in document["stringData"] if k.startswith(credential.ROTATION_PREFIX)]
            data = cluster.pki.monitoring_access_data(int(rotation.removeprefix(credential.ROTATION_PREFIX)))
            document = {**document, "stringData": data}
        if object_key(document) == ("Secret", monitoring.NAMESPACE, alertmanager.CLUSTER_TLS_SECRET):
            document = {**document, "stringData": cluster.pki.alertmanager_mesh_data}
        assert "[secret]" not in json.dumps(document), f"{path} holds a masked value the harness cannot fill"
        documents.append(document)
    crds = [d for d in documents if d["kind"] == "CustomResourceDefinition"]
    rest = [d for d in documents if d["kind"] != "CustomResourceDefinition"]
    lines = []
    for batch in (crds, rest):
        if not batch:
            continue
        result = cluster.kubectl(
            "apply",
            "--server-side",
            f"--field-manager={FIELD_MANAGER}",
            "-f",
            "-",
            input=yaml.safe_dump_all(batch),
            timeout=120,
        )
        lines += result.stdout.splitlines()
        if batch is crds:
            cluster.kubectl(
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                *[f"crd/{d['metadata']['name']}" for d in crds],
                timeout=90,
            )
    return lines


# ---------------------------------------------------------------------- nodes


def join_nodes(
    cluster: Cluster,
    per_pool: int | Mapping[str, int] | None = None,
    per_shard: int | None = None,
    real: bool | Collection[str] = False,
) -> None:
    """The NAT hosts and, of each pool's first shard, one node per scale-set instance up to the pool's
    ``maxNodes`` (or ``per_pool``, for every pool or by pool name); with ``per_shard``, that many
    instances of every shard instead. With ``real`` True every node is a real node (tests/e2e/runtime.py);
    with a collection of pool names, the first node of each of those pools (and every NAT host, if it
    holds ``labels.ROLE_NAT_HOST``); the others run nodesim."""
    prefix_length = cluster.spec.config.network.address_space.prefixlen
    pools = {p.name: p for p in cluster.spec.config.node_pools}
    every_node_real = real is True
    real_pools = frozenset() if isinstance(real, bool) else frozenset(real)
    joining: list[tuple[Machine, str | None, str, bool]] = []
    for scale_set in cluster.plan.scale_sets():
        pool = pools[scale_set.pool]
        wanted = per_pool.get(pool.name) if isinstance(per_pool, Mapping) else per_pool
        if per_shard is not None:
            count = per_shard
        elif scale_set.first_shard:
            count = min(pool.max_nodes, wanted or pool.max_nodes)
        else:
            continue
        joining += [
            (
                scale_set.instance(i),
                pool.name,
                scale_set.vm_size,
                every_node_real or (i == 0 and pool.name in real_pools),
            )
            for i in range(count)
        ]
    for machine in cluster.plan.vms():
        if machine.has_unit(KUBELET_UNIT):
            real_nat_host = every_node_real or labels.ROLE_NAT_HOST in real_pools
            joining.append((machine, None, cluster.spec.config.network.nat_hosts.vm_size, real_nat_host))
    if any(is_real for *_, is_real in joining):
        cluster.box_images = build_images(cluster.plan, cluster.network.binaries, cluster.workdir / "images")
        runtime.start_outside_hosts(cluster.network, cluster.spec.config.network.address_space)
    hosts = {}
    for machine, *_ in joining:
        host = cluster.network.hosts.get(machine.name) or cluster.network.add_host(
            machine.name, [f"{machine.ip}/{prefix_length}"]
        )
        bootstrap = host.root / "etc/kubernetes/bootstrap-kubelet.conf"
        if machine.name not in cluster.network.hosts or not bootstrap.exists():
            install(machine, host, cluster.pki)
        cluster.attestation.add(machine)
        hosts[machine.name] = host
    # Each simulated node's boot program asks for its client certificate first, as systemd orders it before
    # kubelet; a real node's runs in start_real_node. Several at once: each mostly waits for its approval.
    with ThreadPoolExecutor(max_workers=8) as pool_of_joins:
        for _ in pool_of_joins.map(
            lambda m: node_join(cluster, m, hosts[m.name]), [m for m, *_, is_real in joining if not is_real]
        ):
            pass
    for machine, pool, vm_size, is_real in joining:
        host = hosts[machine.name]
        if is_real:
            real_node, process = runtime.start_real_node(
                cluster.network,
                machine,
                host,
                cluster.box_images,
                lambda unit, m=machine, h=host: start_unit(cluster, m, h, unit),
                cluster.spec.config.network.service_cidr,
                lambda m=machine, h=host: node_join(cluster, m, h),
            )
            cluster.real_nodes.append(real_node)
            cluster.nodes.append(Node(machine, host, process, pool))
            continue
        capacity = _capacity(vm_size, _rdma_pods_per_node(cluster.spec))
        argv = [
            "/usr/local/bin/nodesim",
            *machine.unit(KUBELET_UNIT).exec_start[1:],
            f"--hostname-override={machine.name}",
            f"--node-ip={machine.ip}",
            f"--sim-capacity={capacity}",
        ]
        cluster.nodes.append(Node(machine, host, start_unit(cluster, machine, host, KUBELET_UNIT, argv), pool))
    names = {n.machine.name for n in cluster.nodes}
    wait_for(
        f"{len(names)} nodes to register Ready",
        lambda: names <= _ready_nodes(cluster),
        timeout=BOOT_TIMEOUT,
        interval=1,
        on_timeout=cluster.describe,
    )
    if cluster.real_nodes:
        node_local = dns.rendered_node_local_dns(cluster.plan)
        upstream = cluster.get_json("service", "-n", SYSTEM_NAMESPACE, node_local.upstream_service)["spec"]["clusterIP"]
        for node in cluster.real_nodes:
            runtime.start_node_agents(
                cluster.network,
                node,
                lambda unit, n=node: start_unit(cluster, n.machine, n.host, unit),
                node_local,
                upstream,
            )


def node_join(cluster: Cluster, machine: Machine, host: Host) -> subprocess.CompletedProcess:
    """The node's rendered boot program (``supercluster-node-join``), to completion: its client certificate, asked
    for with the attested document the IMDS stand-in signs. IMDS is on-link, as Azure's DHCP routes it. Returns
    the program's run (its output says what it did)."""
    cluster.network.run(host, ["ip", "route", "replace", f"{IMDS_IP}/32", "dev", "eth0"])
    return cluster.network.run(host, machine.unit(JOIN_UNIT).exec_start, timeout=JOIN_TIMEOUT)


def _rdma_pods_per_node(spec: ClusterSpec) -> int:
    """The RDMA plugin's rdmaHcaMax, or 0 when the add-on is off (then nothing advertises the resource)."""
    return spec.addons.rdma_device_plugin.pods_per_node if spec.config.addons.rdma_device_plugin.enabled else 0


def _capacity(vm_size: str, rdma_pods_per_node: int) -> str:
    """What the node advertises, the device plugins' resources included (they run as simulated pods
    here, so the node stands in for them: the GPUs by the size's count, the RDMA resource by the plugin's
    rdmaHcaMax on InfiniBand sizes)."""
    size = VM_SIZES[vm_size]
    capacity = {"cpu": str(size.vcpus), "memory": f"{size.memory_gib}Gi", "ephemeral-storage": "500Gi"}
    if size.gpus:
        capacity[GPU_RESOURCE] = str(size.gpus)
    if size.infiniband and rdma_pods_per_node:
        capacity[RDMA_RESOURCE] = str(rdma_pods_per_node)
    return ",".join(f"{k}={v}" for k, v in capacity.items())


def _ready_nodes(cluster: Cluster) -> set[str]:
    nodes = cluster.get_json("nodes")["items"]
    return {
        n["metadata"]["name"]
        for n in nodes
        if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))
    }
