"""The dev plan booted on the real binaries: control plane, objects, nodes, add-ons, seed lessons.

Every assertion reads what a running process or the apiserver says, never the rendered text alone.
"""

from __future__ import annotations

import base64
import json
import re
import time
import uuid

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from benchmarks.scale.metrics import gauge, parse
from infra.addons import monitoring
from infra.addons.k8s import POD_SECURITY_ENFORCE_LABEL, RUNTIME_DEFAULT_SECCOMP, locked_down
from infra.addons.monitoring import rules
from infra.boot.secret_names import etcd_ca_cert
from infra.control_plane import flowcontrol
from infra.control_plane.admission import TEAM_TAINT_KEY, team_namespace
from infra.control_plane.controller_manager import SECURE_PORT as CM_SECURE_PORT
from infra.control_plane.scheduler import SECURE_PORT as SCHEDULER_SECURE_PORT
from infra.etcd.spec import EVENTS, MAIN
from infra.facts.labels import GPU_STARTUP_TAINT_KEY, ROLE_CPU, ROLE_LABEL
from infra.network.security_groups import monitoring_pools
from tests.e2e.cluster import (
    APISERVER_UNIT,
    CONTROL_PLANE_UNITS,
    KUBELET_UNIT,
    Cluster,
    apply_objects,
    install,
    node_join,
    unit_argv,
)
from tests.e2e.hosts import wait_for
from tests.e2e.placement import unplaced

pytestmark = pytest.mark.e2e

# What a component prints when a flag or config field is refused or on its way out.
REFUSED = re.compile(
    r"unknown flag|flag provided but not defined|invalid argument|unknown field|"
    r"strict decoding error|deprecated|no longer supported",
    re.I,
)
SETTLE_SECONDS = 60
# The flag of each control-plane unit that names the machine's own address.
ADDRESS_FLAG = dict(zip(CONTROL_PLANE_UNITS, ("--advertise-address", "--bind-address", "--bind-address"), strict=True))


def node_labels_flag(argv: list[str]) -> dict[str, str]:
    (flag,) = [a for a in argv if a.startswith("--node-labels=")]
    return dict(pair.split("=", 1) for pair in flag.split("=", 1)[1].split(","))


def test_every_control_plane_process_runs_its_rendered_unit_with_no_refused_or_deprecated_flag(dev: Cluster):
    for machine, host, processes in dev.control_plane:
        for unit in CONTROL_PLANE_UNITS:
            process = processes[unit]
            assert process.alive(), f"{machine.name} {unit} exited:\n{process.output()[-2000:]}"
            assert process.argv == unit_argv(machine, host, unit), "the harness must run the rendered line as systemd"
            # The address the machine's identity unit read from IMDS at boot: its own, in every flag that names it.
            addresses = [a.split("=", 1)[1] for a in process.argv if a.split("=")[0] == ADDRESS_FLAG[unit]]
            assert addresses == [machine.ip], (unit, addresses)
            log = process.output()  # a restart of any unit fails the test (tests/e2e/restarts.py)
            refused = [line for line in log.splitlines() if REFUSED.search(line)]
            assert not refused, f"{machine.name} {unit}:\n" + "\n".join(refused[:10])
    for members in dev.etcd.values():
        for machine, _, process in members:
            assert process.alive(), f"{machine.name} etcd exited:\n{process.output()[-2000:]}"
            assert not [
                line
                for line in process.output().splitlines()
                if '"level":"fatal"' in line or "deprecated" in line.lower()
            ]


def test_readyz_answers_anonymously_and_the_api_refuses_anonymous_requests(dev: Cluster):
    assert dev.raw("/readyz", anonymous=True) == (200, "ok")
    assert dev.raw("/livez", anonymous=True)[0] == 200
    for path in ("/api", "/api/v1/namespaces", "/apis", "/metrics", "/version"):
        assert dev.raw(path, anonymous=True)[0] in (401, 403), path
    assert dev.raw("/api")[0] == 200


def test_every_rendered_object_is_accepted_by_server_side_apply_with_no_refusal(dev: Cluster):
    # Applied once by the boot (CRDs first); a second apply must be a no-op that refuses nothing.
    lines = apply_objects(dev)
    objects = dev.plan.kubernetes_objects()
    assert len(lines) == len(objects)
    assert all(line.endswith("serverside-applied") for line in lines), lines


def test_scheduler_and_controller_manager_answer_prometheus_at_the_vm_address_and_refuse_unknown_callers(
    dev: Cluster,
):
    """Both serve /metrics on the apiserver VM's own address, where the control-plane shard scrapes
    them (the rendered scrape targets), and delegate authentication and authorization to the
    apiserver: Prometheus's ServiceAccount token (its ClusterRole grants get on /metrics) is answered
    from a monitoring-pool node; no token, or a token RBAC grants nothing, is refused. Loopback no
    longer answers: the bind is the one address, not every interface."""
    prometheus = dev.kubectl("create", "token", monitoring.SERVICE_ACCOUNT, "-n", monitoring.NAMESPACE).stdout.strip()
    nobody = dev.kubectl("create", "token", "default", "-n", "default").stdout.strip()
    pools = set(monitoring_pools(dev.spec.config))
    scraper = next(node for node in dev.nodes if node.pool in pools)
    # The control-plane shard's configuration as the cluster holds it (the ConfigMap Prometheus mounts).
    name = f"{monitoring.NAME}-{monitoring.CONTROL_PLANE_SHARD}"
    shard = yaml.safe_load(dev.get_json("configmap", name, "-n", monitoring.NAMESPACE)["data"]["prometheus.yml"])
    # Found as the apiservers are: each apiserver's address in the kubernetes Service's EndpointSlice, the
    # port rewritten by the job's relabelling (Prometheus's own reading is test_prometheus.py's).
    slices = dev.get_json("endpointslices", "-n", "default", "-l", "kubernetes.io/service-name=kubernetes")
    advertised = sorted(a for s in slices["items"] for e in s.get("endpoints") or [] for a in e["addresses"])
    targets = {}
    for job in shard["scrape_configs"]:
        if job["job_name"] in (rules.JOB_SCHEDULER, rules.JOB_CONTROLLER_MANAGER):
            assert job["kubernetes_sd_configs"] == [{"role": "endpointslice", "namespaces": {"names": ["default"]}}]
            rewrite = job["relabel_configs"][-1]
            targets[job["job_name"]] = [
                re.sub(f"^{rewrite['regex']}$", rewrite["replacement"].replace("${1}", r"\1"), f"{a}:6443")
                for a in advertised
            ]

    def status(host, url: str, token: str | None = None) -> str:
        headers = ["-H", f"Authorization: Bearer {token}"] if token else []
        argv = ["curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", *headers, url]
        return dev.network.run(host, argv, check=False, timeout=20).stdout

    for job, port in ((rules.JOB_SCHEDULER, SCHEDULER_SECURE_PORT), (rules.JOB_CONTROLLER_MANAGER, CM_SECURE_PORT)):
        assert targets[job] == sorted(f"{machine.ip}:{port}" for machine, _, _ in dev.control_plane)
        for machine, host, _ in dev.control_plane:
            url = f"https://{machine.ip}:{port}/metrics"
            assert status(scraper.host, url, prometheus) == "200", (job, machine.name)
            assert status(scraper.host, url) in ("401", "403"), (job, machine.name)
            assert status(scraper.host, url, nobody) == "403", (job, machine.name)
            assert status(host, f"https://127.0.0.1:{port}/metrics", prometheus) == "000", (job, machine.name)


def test_events_are_stored_in_the_events_etcd_and_never_in_the_main_etcd(dev: Cluster):
    key = dev.create_probe_event()
    assert dev.etcdctl(EVENTS, "get", key, "--keys-only").stdout.strip() == key
    assert dev.etcdctl(MAIN, "get", "/registry/events/", "--prefix", "--keys-only").stdout.strip() == ""
    # ... while everything else lives in the main etcd.
    assert dev.etcdctl(MAIN, "get", "/registry/namespaces/default", "--keys-only").stdout.strip()


def test_a_member_of_one_etcd_cluster_is_refused_by_the_other(dev: Cluster, tmp_path):
    """Each etcd cluster has a CA of its own (infra/etcd/certificates.py): a member's client certificate
    reads its own cluster and is refused by the other, which the apiserver's certificate reads (above)."""
    for own, other in ((MAIN, EVENTS), (EVENTS, MAIN)):
        other_ca = tmp_path / f"{other}-ca.crt"
        other_ca.write_text(dev.pki.vault[etcd_ca_cert(other)])
        read = ("get", "/registry/", "--prefix", "--keys-only", "--limit=1")
        dev.etcdctl(other, *read, cacert=str(other_ca))  # the control: with the same trust, the owner reads
        (own_member, _, _), (target, _, etcd) = dev.etcd[own][0], dev.etcd[other][0]
        refused = dev.etcdctl(own, *read, endpoints=[target.ip], cacert=str(other_ca), timeout=40, check=False)
        assert refused.returncode != 0, f"a {own} member read the {other} cluster: {refused.stdout}"
        # The refusal is the server's, on the certificate (the client sees only a reset connection).
        wait_for(
            f"{target.name} to log the {own} member's certificate as refused",
            lambda own_member=own_member, etcd=etcd: any(
                "rejected connection on client endpoint" in line
                and f'"remote-addr":"{own_member.ip}:' in line
                and "certificate signed by unknown authority" in line
                for line in etcd.output().splitlines()
            ),
            timeout=30,
        )


def test_secrets_are_encrypted_at_rest(dev: Cluster):
    value = dev.etcdctl(
        "etcd",
        "get",
        "/registry/secrets/kube-system/" + f"bootstrap-token-{dev.pki.bootstrap_token_id}",
        "--print-value-only",
    ).stdout
    assert value.startswith("k8s:enc:secretbox:v1:"), value[:40]


def test_the_audit_log_is_written_under_the_rendered_policy(dev: Cluster):
    dev.kubectl("get", "secrets", "-n", "kube-system")
    machine, host, processes = dev.control_plane[0]
    argv = processes[APISERVER_UNIT].argv
    (path,) = [a.split("=", 1)[1] for a in argv if a.startswith("--audit-log-path=")]
    log = host.root / path.lstrip("/")
    entries = wait_for(
        "the audit log to record the secrets list",
        lambda: [
            e
            for e in map(json.loads, log.read_text().splitlines())
            if e.get("objectRef", {}).get("resource") == "secrets" and e.get("verb") == "list"
        ],
        timeout=30,
    )
    # Secrets are audited at Metadata level: never their contents.
    assert all(e["level"] == "Metadata" and "responseObject" not in e for e in entries)
    # Health probes are not audited at all (level None for /readyz).
    assert not any(e.get("requestURI", "").startswith("/readyz") for e in map(json.loads, log.read_text().splitlines()))


def test_every_node_joins_through_the_bootstrap_token_with_exactly_its_rendered_labels_and_taints(dev: Cluster):
    csrs = dev.get_json("csr")["items"]
    approved = {
        c["spec"]["username"]: c
        for c in csrs
        if any(cond["type"] == "Approved" for cond in c["status"].get("conditions", []))
    }
    assert f"system:bootstrap:{dev.pki.bootstrap_token_id}" in approved
    assert all(c["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet" for c in csrs)
    registered = {n["metadata"]["name"]: n for n in dev.get_json("nodes")["items"]}
    for node in dev.nodes:
        assert node.machine.name in registered, f"{node.machine.name} did not register"
        registered_node = registered[node.machine.name]
        rendered_labels = node_labels_flag(node.machine.unit(KUBELET_UNIT).exec_start)
        labels = registered_node["metadata"]["labels"]
        assert {k: labels.get(k) for k in rendered_labels} == rendered_labels
        config = yaml.safe_load((node.machine.files / "etc/kubernetes/kubelet-config.yaml").read_text())
        rendered_taints = [
            {k: t[k] for k in ("key", "value", "effect") if k in t} for t in config.get("registerWithTaints", [])
        ]
        taints = [
            {k: t[k] for k in ("key", "value", "effect") if k in t} for t in registered_node["spec"].get("taints", [])
        ]
        assert taints == rendered_taints, node.machine.name
        assert int(registered_node["status"]["allocatable"]["pods"]) == config["maxPods"]


def test_joining_nodes_requests_are_queued_in_the_join_priority_level(dev: Cluster):
    """The apiservers accepted the rendered join level and classify a joining node's requests into it:
    a Node create as a node, a CSR list as a bootstrap token, each answered with the join FlowSchema's
    UID (the response header APF sets); a running node's Lease request still goes to system-node-high.
    The booted nodes' joins went through it (at least one request per node), and none was refused."""
    uid = dev.get_json("flowschema", flowcontrol.JOIN_LEVEL)["metadata"]["uid"]
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "join-probe"}}
    node_identity = ("system:node:join-probe", flowcontrol.NODES_GROUP)
    token_identity = ("system:bootstrap:probe0", flowcontrol.BOOTSTRAPPERS_GROUP)
    lease = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/join-probe"
    assert _flow_schema_uid(dev, "POST", "/api/v1/nodes?dryRun=All", node_identity, node) == uid
    assert (
        _flow_schema_uid(dev, "GET", "/apis/certificates.k8s.io/v1/certificatesigningrequests", token_identity) == uid
    )
    assert _flow_schema_uid(dev, "GET", lease, node_identity) != uid

    dispatched = rejected = 0.0
    joins = {"flow_schema": flowcontrol.JOIN_LEVEL, "priority_level": flowcontrol.JOIN_LEVEL}.items()

    def ours(labels) -> bool:
        return joins <= labels.items()

    for machine, _, _ in dev.control_plane:
        status, body = dev.raw("/metrics", url=f"https://{machine.ip}:6443", timeout=60)
        assert status == 200, (machine.name, body[-500:])
        scrape = parse(body)
        dispatched += gauge(scrape, "apiserver_flowcontrol_dispatched_requests_total", ours)
        rejected += gauge(scrape, "apiserver_flowcontrol_rejected_requests_total", ours)
    assert dispatched >= len(dev.nodes), (dispatched, len(dev.nodes))
    assert rejected == 0


def _flow_schema_uid(dev: Cluster, method: str, path: str, identity: tuple[str, str], body: dict | None = None) -> str:
    """The UID of the FlowSchema the apiserver matched ``method path`` to, made as ``identity``
    (impersonated by the admin: API Priority and Fairness classifies the impersonated user)."""
    user, group = identity
    argv = ["curl", "-s", "-o", "/dev/null", "-D", "-", "--max-time", "20", "-X", method]
    argv += ["--cacert", str(dev.workdir / "ca.crt")]
    argv += ["--cert", str(dev.workdir / "admin.crt"), "--key", str(dev.workdir / "admin.key")]
    argv += ["-H", f"Impersonate-User: {user}", "-H", f"Impersonate-Group: {group}"]
    if body is not None:
        argv += ["-H", "Content-Type: application/json", "--data", json.dumps(body)]
    headers = dev.network.run(dev.admin, [*argv, dev.apiserver_url + path], timeout=40).stdout
    found = re.search(r"^x-kubernetes-pf-flowschema-uid:\s*(\S+)", headers, re.I | re.M)
    assert found, headers
    return found.group(1)


def test_the_real_kubelet_accepts_the_rendered_flags_and_config_and_starts_with_the_joins_certificate(dev: Cluster):
    """The real kubelet binary, run with each pool's rendered ExecStart verbatim as a fresh instance, after the
    node's rendered join program (``supercluster-node-join``, which systemd orders first): the join turns the
    bootstrap token and the VM's attested document into the node's client certificate (approved by the
    apiservers' approver, signed by the controller-manager) and kubelet's kubeconfig; every flag and the
    rendered config are accepted, and kubelet uses that certificate: it sends no request of its own. It goes
    no further than the container runtime, which cannot run here: its socket listens and never answers.
    nodesim stands in for the rest (docs/cluster-in-a-box.md)."""
    prefix_length = dev.spec.config.network.address_space.prefixlen
    pools = {p.name: p for p in dev.spec.config.node_pools}
    for scale_set in filter(lambda s: s.first_shard, dev.plan.scale_sets()):
        pool = pools[scale_set.pool]
        machine = scale_set.instance(pool.max_nodes)  # one instance past the ones nodesim holds
        host = dev.network.add_host(machine.name, [f"{machine.ip}/{prefix_length}"])
        install(machine, host, dev.pki)
        dev.attestation.add(machine)
        node_join(dev, machine, host)
        joined = _csr_of(dev, f"system:node:{machine.name}")
        assert joined and joined["status"].get("certificate"), joined
        # The drop-in folder the provider-ID ExecStartPre fills from IMDS (no IMDS here): empty.
        (host.root / "etc/kubernetes/kubelet.conf.d").mkdir(exist_ok=True)
        config = yaml.safe_load((machine.files / "etc/kubernetes/kubelet-config.yaml").read_text())
        socket_path = config["containerRuntimeEndpoint"].removeprefix("unix://")
        runtime = dev.network.start(
            host,
            "silent-runtime",
            [
                "python3",
                "-c",
                (
                    "import socket, sys, time; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(64); "
                    "time.sleep(600)"
                ),
                socket_path,
            ],
        )
        # wait_for calls its lambdas at once, within this iteration: late binding cannot bite (B023).
        wait_for(
            "the runtime socket",
            lambda: (host.root / socket_path.lstrip("/")).exists(),  # noqa: B023
            timeout=10,
        )
        argv = [*machine.unit(KUBELET_UNIT).exec_start, f"--hostname-override={machine.name}"]
        process = dev.network.start(host, "real-kubelet", argv)
        try:
            wait_for(
                f"the real kubelet on {machine.name} to reach the runtime check",
                lambda: "validate CRI v1 runtime API" in process.output(),  # noqa: B023
                timeout=90,
                on_timeout=lambda: process.output()[-3000:],  # noqa: B023
            )
        finally:
            process.stop()
            runtime.stop()
        assert joined["spec"]["username"] == f"system:bootstrap:{dev.pki.bootstrap_token_id}"
        assert {c["reason"] for c in joined["status"]["conditions"] if c["type"] == "Approved"} == {
            "SuperclusterAttestedJoin"
        }
        sent = [c["metadata"]["name"] for c in _csrs_of(dev, f"system:node:{machine.name}")]
        assert sent == [joined["metadata"]["name"]], sent  # kubelet sent none of its own
        log = process.output()
        refused = [line for line in log.splitlines() if REFUSED.search(line)]
        assert not refused, "\n".join(refused)
        failed = [line for line in log.splitlines() if "command failed" in line]
        assert all("validate CRI v1 runtime API" in line for line in failed), failed  # stopped at the runtime


def _csrs_of(dev: Cluster, common_name: str) -> list[dict]:
    found = []
    for csr in dev.get_json("csr")["items"]:
        request = x509.load_pem_x509_csr(base64.b64decode(csr["spec"]["request"]))
        if request.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == common_name:
            found.append(csr)
    return found


def _csr_of(dev: Cluster, common_name: str) -> dict | None:
    return next(iter(_csrs_of(dev, common_name)), None)


def test_every_add_on_workload_gets_its_pods_bound_on_the_booted_nodes(dev: Cluster):
    """Walks every Deployment, DaemonSet and StatefulSet of the plan: a new add-on is covered without a new test.
    A selector naming a label no node registers leaves its pods Pending, and fails here; a DaemonSet needs a
    pod on every booted node kind its selector picks (tests/e2e/placement.py)."""
    try:
        wait_for(
            "every add-on workload to have its pods bound",
            lambda: not unplaced(dev, running=True),
            timeout=SETTLE_SECONDS,
            interval=2,
        )
    except TimeoutError:
        pending = dev.kubectl("get", "pods", "-A", "--field-selector=status.phase=Pending", "-o", "wide").stdout
        pytest.fail("\n".join(unplaced(dev, running=True)) + "\nPending pods:\n" + pending)


def test_the_planned_masked_secret_passes_server_side_validation(dev: Cluster):
    """The plan masks each value of a Secret and keeps its shape (plan.mocks.masked): the object exactly as
    planned, "[secret]" values and all, is one the apiserver accepts."""
    secrets = [(path, d) for path, d in dev.plan.kubernetes_objects() if d["kind"] == "Secret"]
    assert secrets
    for path, document in secrets:
        assert set(document["stringData"].values()) == {"[secret]"}, path
        result = dev.kubectl("apply", "--dry-run=server", "-f", str(path), check=False)
        assert result.returncode == 0, result.stderr


def test_the_gpu_health_check_lifts_only_its_own_nodes_start_up_taint(dev: Cluster):
    gpu_nodes = [n for n in dev.nodes if n.pool and n.machine.files.name.startswith("dev-pool-gpu")]
    assert len(gpu_nodes) >= 2, "dev boots at least two GPU nodes"
    mine, other = gpu_nodes[0], gpu_nodes[1]
    pods = dev.get_json("pods", "-n", "kube-system", "-l", "app.kubernetes.io/name=gpu-health-check-gpu")["items"]
    (pod,) = [p for p in pods if p["spec"].get("nodeName") == mine.machine.name]
    # The pod's own projected token: bound to the pod, so it names the pod's node.
    token = dev.kubectl(
        "create",
        "token",
        "gpu-health-check",
        "-n",
        "kube-system",
        "--bound-object-kind=Pod",
        f"--bound-object-name={pod['metadata']['name']}",
        f"--bound-object-uid={pod['metadata']['uid']}",
    ).stdout.strip()
    script = dev.get_json("configmap", "gpu-health-check", "-n", "kube-system")["data"]["node_taint.py"]
    account = mine.host.root / "var/lib/kubelet/box-serviceaccount"
    account.mkdir(parents=True, exist_ok=True)
    (account / "token").write_text(token)
    (account / "ca.crt").write_text(dev.pki.cluster_ca.cert_pem)
    (account / "node_taint.py").write_text(script)

    def reconcile(node: str, healthy: bool) -> str:
        # The rendered script's own reconcile(), run on the GPU node's host against the load balancer
        # (in a pod, kubernetes.default.svc reaches the same apiservers through kube-proxy).
        program = (
            "import runpy, sys, urllib.error; m = runpy.run_path(sys.argv[1]); "
            "m['reconcile'].__globals__.update(API=sys.argv[2], ACCOUNT=sys.argv[3])\n"
            "try: print(m['reconcile'](sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7] == 'healthy'))\n"
            "except urllib.error.HTTPError as e: print(e.code, e.read().decode())"
        )
        result = dev.network.run(
            mine.host,
            [
                "python3",
                "-c",
                program,
                str(account / "node_taint.py"),
                dev.apiserver_url,
                str(account),
                node,
                GPU_STARTUP_TAINT_KEY,
                "NoSchedule",
                "healthy" if healthy else "unhealthy",
            ],
            check=False,
        )
        return result.stdout.strip() or result.stderr.strip().splitlines()[-1]

    def has_taint(node: str) -> bool:
        taints = dev.get_json("node", node)["spec"].get("taints", [])
        return any(t["key"] == GPU_STARTUP_TAINT_KEY for t in taints)

    assert has_taint(mine.machine.name) and has_taint(other.machine.name)
    # Refused by the rendered ValidatingAdmissionPolicy (HTTP 422), not by RBAC: the role may patch nodes.
    refused = reconcile(other.machine.name, healthy=True)
    assert refused.startswith("422 ") and "may only change its own node" in refused, refused
    assert has_taint(other.machine.name)
    assert reconcile(mine.machine.name, healthy=True) == "untainted"
    assert not has_taint(mine.machine.name) and has_taint(other.machine.name)
    assert reconcile(mine.machine.name, healthy=False) == "tainted"
    assert has_taint(mine.machine.name)


# ---------------------------------------------------------------------- seed lessons, as behaviour


def _pod(
    name: str, *, cpu: str, labels: dict | None = None, scheduler: str | None = None, one_per_node: str | None = None
) -> dict:
    """A pause pod on the CPU nodes; ``one_per_node``: never on a node with another pod of that ``box`` label."""
    spec: dict = {
        "containers": [
            {
                "name": "c",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}},
            }
        ],
        "nodeSelector": {ROLE_LABEL: ROLE_CPU},
    }
    if scheduler:
        spec["schedulerName"] = scheduler
    if one_per_node:
        spec["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"box": one_per_node}}, "topologyKey": "kubernetes.io/hostname"}
                ]
            }
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
        "spec": spec,
    }


def _bound(dev: Cluster, selector: str) -> dict[str, str | None]:
    return {
        p["metadata"]["name"]: p["spec"].get("nodeName")
        for p in dev.get_json("pods", "-n", "default", "-l", selector)["items"]
    }


def _free(dev: Cluster, node: str) -> tuple[int, int]:
    """``(free CPU in millicores, free pod slots)`` of a node: allocatable less what its pods request."""

    def millis(quantity: str) -> int:
        return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)

    allocatable = dev.get_json("node", node)["status"]["allocatable"]
    pods = [
        p
        for p in dev.get_json("pods", "-A", f"--field-selector=spec.nodeName={node}")["items"]
        if p["status"].get("phase") not in ("Succeeded", "Failed")
    ]
    requested = sum(
        millis(c.get("resources", {}).get("requests", {}).get("cpu", "0"))
        for p in pods
        for c in p["spec"]["containers"]
    )
    return millis(allocatable["cpu"]) - requested, int(allocatable["pods"]) - len(pods)


def test_most_allocated_packs_small_pods_onto_the_fewest_nodes(dev: Cluster):
    """Scores are whole numbers and equal scores are broken at random, so two CPU nodes the add-ons
    left allocated alike could share the pods. The first small pod lands on a fullest node; an
    anchor pinned there with half its free CPU puts it far ahead; the next pods fill it up to its
    maxPods and only then overflow, all onto one other node. Spreading (LeastAllocated) would send
    them to the emptiest nodes instead."""
    run = uuid.uuid4().hex[:6]
    first = _pod(f"pack-{run}-0", cpu="100m", labels={"box": f"pack-{run}"})
    dev.kubectl("create", "-f", "-", input=yaml.safe_dump(first))
    (node,) = wait_for(
        "the first small pod to bind", lambda: [n for n in _bound(dev, f"box=pack-{run}").values() if n], timeout=60
    )
    free_cpu, free_slots = _free(dev, node)
    # Two slots are enough: the anchor takes one, the next small pod must still pick this node over emptier
    # ones (LeastAllocated would not), and the rest must overflow onto one other node. Which CPU node the
    # first pod lands on is a tie broken at random, and the add-ons' DaemonSets leave some with only two.
    assert free_slots >= 2, f"{node} has {free_slots} pod slots left: too few to show packing"
    anchor = _pod(f"pack-{run}-anchor", cpu=f"{free_cpu // 2}m", labels={"box": f"pack-{run}"})
    anchor["spec"]["nodeSelector"]["kubernetes.io/hostname"] = node
    dev.kubectl("create", "-f", "-", input=yaml.safe_dump(anchor))
    wait_for("the anchor to bind", lambda: _bound(dev, f"box=pack-{run}").get(f"pack-{run}-anchor"), timeout=60)
    pods = [_pod(f"pack-{run}-{i}", cpu="100m", labels={"box": f"pack-{run}"}) for i in range(1, 6)]
    dev.kubectl("create", "-f", "-", input=yaml.safe_dump_all(pods))
    bound = wait_for(
        "six small pods to bind",
        lambda: (b := _bound(dev, f"box=pack-{run}")) and all(b.values()) and len(b) == 7 and b,
        timeout=60,
    )
    small = [n for name, n in bound.items() if not name.endswith("-anchor")]
    on_node = min(len(small), 1 + free_slots - 1)  # the first pod, then the slots left once the anchor took one
    assert small.count(node) == on_node, f"MostAllocated should fill {node} ({free_slots} slots) first: {bound}"
    assert len(set(small) - {node}) <= 1, f"the overflow should pack onto one other node: {bound}"
    dev.kubectl("delete", "pods", "-n", "default", "-l", f"box=pack-{run}", "--wait=false")


def test_coredns_replicas_never_share_a_node_and_extra_replicas_stay_pending(dev: Cluster):
    deployment = dev.get_json("deployment", "coredns", "-n", "kube-system")
    selector = deployment["spec"]["template"]["spec"].get("nodeSelector", {})
    eligible = [
        n
        for n in dev.get_json("nodes")["items"]
        if all(n["metadata"]["labels"].get(k) == v for k, v in selector.items())
        and not any(t["effect"] == "NoSchedule" for t in n["spec"].get("taints", []))
    ]
    dev.kubectl("scale", "deployment/coredns", "-n", "kube-system", f"--replicas={len(eligible) + 1}")
    try:
        labels = ",".join(f"{k}={v}" for k, v in deployment["spec"]["selector"]["matchLabels"].items())

        def placed():
            pods = dev.get_json("pods", "-n", "kube-system", "-l", labels)["items"]
            nodes = [p["spec"].get("nodeName") for p in pods]
            return len(pods) == len(eligible) + 1 and sum(1 for n in nodes if n) == len(eligible) and nodes

        nodes = wait_for("CoreDNS replicas to spread over every eligible node", placed, timeout=60)
        bound = [n for n in nodes if n]
        assert len(bound) == len(set(bound)), f"two CoreDNS replicas share a node: {bound}"
        time.sleep(5)  # the extra replica stays Pending: no node is left without one
        assert sum(1 for n in placed() or [] if n is None) == 1
    finally:
        dev.kubectl("scale", "deployment/coredns", "-n", "kube-system", "--replicas=1")


def test_a_pod_group_binds_whole_or_not_at_all(dev: Cluster):
    """Coscheduling: a gang whose members cannot all fit binds none of them; one that fits binds whole.
    Members keep to one per node, so a gang of one more member than there are CPU nodes cannot fit."""
    cpu_nodes = dev.get_json("nodes", "-l", f"{ROLE_LABEL}={ROLE_CPU}")["items"]
    run = uuid.uuid4().hex[:6]
    gangs = {f"fits-{run}": len(cpu_nodes), f"too-big-{run}": len(cpu_nodes) + 1}
    for name, members in gangs.items():
        group = {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"minMember": members},
        }
        pods = [
            _pod(
                f"{name}-{i}",
                cpu="100m",
                scheduler="gang-scheduler",
                one_per_node=name,
                labels={"scheduling.x-k8s.io/pod-group": name, "box": name},
            )
            for i in range(members)
        ]
        dev.kubectl("create", "-f", "-", input=yaml.safe_dump_all([group, *pods]))
    try:
        fits = f"fits-{run}"
        wait_for(
            "the gang that fits to bind whole",
            lambda: len(b := _bound(dev, f"box={fits}")) == gangs[fits] and all(b.values()),
            timeout=90,
        )
        time.sleep(10)  # long enough for the scheduler to have tried the big gang several times
        too_big = _bound(dev, f"box=too-big-{run}")
        assert len(too_big) == gangs[f"too-big-{run}"] and not any(too_big.values()), too_big
    finally:
        dev.kubectl("delete", "pods,podgroups", "-n", "default", "-l", "box", "--wait=false")


# ---------------------------------------------------------------------- admission, as the apiserver applies it


def _create(dev: Cluster, *documents: dict) -> tuple[bool, str]:
    result = dev.kubectl("create", "-f", "-", input=yaml.safe_dump_all(documents), check=False)
    return result.returncode == 0, result.stderr + result.stdout


def test_tenant_pods_cannot_reach_their_node_and_system_agents_still_can(dev: Cluster):
    """Pod Security: a tenant namespace enforces baseline by default, so no privileged pod, no host
    network and no host path; kube-system, where the node agents run, is exempt."""
    namespace = f"tenant-{uuid.uuid4().hex[:6]}"
    assert _create(dev, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})[0]
    escapes = {
        "privileged": {
            "containers": [
                {"name": "c", "image": "registry.k8s.io/pause:3.10", "securityContext": {"privileged": True}}
            ]
        },
        "host network": {"hostNetwork": True, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
        "host path": {
            "containers": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.10",
                    "volumeMounts": [{"name": "root", "mountPath": "/host"}],
                }
            ],
            "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
        },
    }
    for what, spec in escapes.items():
        ok, output = _create(
            dev,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": what.replace(" ", "-"), "namespace": namespace},
                "spec": spec,
            },
        )
        assert not ok and 'violates PodSecurity "baseline' in output, (what, output)
    ok, output = _create(
        dev,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "ordinary", "namespace": namespace},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
        },
    )
    assert ok, output
    assert 'would violate PodSecurity "restricted' in output  # warned, not refused
    ok, output = _create(
        dev,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"agent-{namespace}", "namespace": "kube-system"},
            "spec": escapes["host network"],
        },
    )
    assert ok, output
    dev.kubectl("delete", "namespace", namespace, "--wait=false")
    dev.kubectl("delete", "pod", f"agent-{namespace}", "-n", "kube-system", "--wait=false")


def test_add_on_namespaces_enforce_the_level_they_state(dev: Cluster):
    """Each add-on namespace's own Pod Security label (restricted) is what the apiserver enforces there: a
    pod that would pass baseline is refused, one in the add-ons' locked-down shape is admitted."""
    namespaces = {
        item["metadata"]["name"]: item["metadata"]["labels"][POD_SECURITY_ENFORCE_LABEL]
        for item in dev.get_json("namespaces")["items"]
        if POD_SECURITY_ENFORCE_LABEL in item["metadata"].get("labels", {})
    }
    # The one exception, Prometheus's hostPath TSDB on the node's local NVMe (tests/infra/test_addons_pod_security.py).
    assert namespaces.pop(monitoring.NAMESPACE) == "privileged", namespaces
    assert namespaces and set(namespaces.values()) == {"restricted"}, namespaces
    plain = [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]
    locked = [{**plain[0], "securityContext": {**locked_down(), **RUNTIME_DEFAULT_SECCOMP}}]
    for namespace in namespaces:
        name = f"probe-{uuid.uuid4().hex[:6]}"
        ok, output = _create(
            dev,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"containers": plain},
            },
        )
        assert not ok and 'violates PodSecurity "restricted' in output, (namespace, output)
        ok, output = _create(
            dev,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"containers": locked},
            },
        )
        assert ok, (namespace, output)
        dev.kubectl("delete", "pod", name, "-n", namespace, "--wait=false")


def test_a_team_namespace_gets_its_pools_selector_and_toleration_and_no_other(dev: Cluster):
    """The team-pool runbook (docs/runbooks/team-isolation.md), against the real apiserver: the namespace's
    annotations put the node selector and toleration on every pod, and its whitelist refuses other tolerations."""
    taint = {"key": TEAM_TAINT_KEY, "operator": "Equal", "value": "vision", "effect": "NoSchedule"}
    namespace = f"team-vision-{uuid.uuid4().hex[:6]}"
    assert _create(dev, team_namespace(namespace, "vision"))[0]
    container = [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]
    burstable = [{**container[0], "resources": {"requests": {"cpu": "100m"}}}]  # gets memory-pressure added
    for name, containers in (("job", container), ("burstable-job", burstable)):
        ok, output = _create(
            dev,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"containers": containers},
            },
        )
        assert ok, output
        pod = dev.get_json("pod", name, "-n", namespace)["spec"]
        assert pod["nodeSelector"] == {TEAM_TAINT_KEY: "vision"}
        assert taint in [{k: t.get(k) for k in taint} for t in pod["tolerations"]]
    other_team = {**taint, "value": "speech"}
    ok, output = _create(
        dev,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "sneak", "namespace": namespace},
            "spec": {"containers": container, "tolerations": [other_team]},
        },
    )
    assert not ok and "conflict with its namespace whitelist" in output, output
    dev.kubectl("delete", "namespace", namespace, "--wait=false")
