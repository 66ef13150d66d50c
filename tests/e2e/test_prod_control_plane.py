"""prod booted on the real binaries: its control-plane shape (5 + 3 etcd members, 5 apiservers) and nodes
of every pool (tests/e2e/conftest.py), one GPU node real."""

from __future__ import annotations

import json
import uuid

import pytest
import yaml

from infra.addons import balloons, gpu_health_check
from infra.addons.shared_names import SYSTEM_NAMESPACE
from infra.boot.secret_names import NODE_BOOTSTRAP_TOKEN
from infra.boot.secrets import IMDS_TOKEN_SCRIPT
from infra.cluster.node_checks import kind_name, runs_on
from infra.control_plane import csr_approval
from infra.control_plane.csr_approval import KUBELET_SERVING_SIGNER
from infra.control_plane.csr_approval import UNIT as CSR_APPROVER_UNIT
from infra.control_plane.paths import CONTROLLER_MANAGER_UNIT, SCHEDULER_UNIT
from infra.control_plane.token_minting import MINTED_BY, MINTED_LABEL
from infra.control_plane.token_minting import UNIT as TOKEN_MINTER_UNIT
from infra.etcd.spec import EVENTS, MAIN, etcd_cluster_spec
from infra.facts.labels import GPU_RESOURCE, HOSTNAME_LABEL
from infra.node.cni import IMDS_IP
from tests.e2e import imds, pod_processes
from tests.e2e.cluster import APISERVER_UNIT, ETCD_UNIT, Cluster, start_unit
from tests.e2e.gpu_health import HealthCheckPod, StandIns, advertise_gpus, has_startup_taint
from tests.e2e.hosts import wait_for
from tests.e2e.pki import node_csr
from tests.e2e.placement import plan_node_kinds, unplaced

pytestmark = pytest.mark.e2e

PLACE_SECONDS = 90  # the scheduler binds a few dozen pods; nodesim reports them within seconds
SANDBOX_SECONDS = 120  # a real node builds one sandbox per pod; a dozen took over 35 s on CI's 2 cores


def test_both_etcd_clusters_form_with_exactly_their_rendered_members(prod: Cluster):
    for role, expected in ((MAIN, 5), (EVENTS, 3)):
        members = yaml.safe_load(prod.etcdctl(role, "member", "list", "-w", "json").stdout)["members"]
        rendered = etcd_cluster_spec(prod.spec, role).members
        assert len(rendered) == expected
        assert sorted(m["name"] for m in members) == sorted(m.name for m in rendered)
        assert sorted(m["peerURLs"][0] for m in members) == sorted(m.peer_url for m in rendered)


def test_every_apiserver_is_ready_and_reads_both_etcd_clusters(prod: Cluster):
    assert len(prod.control_plane) >= 2
    for machine, _, processes in prod.control_plane:
        assert processes[APISERVER_UNIT].alive(), processes[APISERVER_UNIT].output()[-2000:]
        status, body = prod.raw("/readyz?verbose", url=f"https://{machine.ip}:6443")
        assert status == 200 and "[+]etcd ok" in body, body
    key = prod.create_probe_event()
    # Whichever apiserver the load balancer picked, the Event is in the events cluster only.
    assert prod.etcdctl(EVENTS, "get", key, "--keys-only").stdout.strip() == key
    assert not prod.etcdctl(MAIN, "get", "/registry/events/", "--prefix", "--keys-only").stdout.strip()


def test_five_apiservers_mint_one_bootstrap_token_into_key_vault(prod: Cluster):
    """Every apiserver runs the token minter; their Lease lets one mint (infra/control_plane/token_minting.py):
    one token of the minter's, the one in Key Vault (the stand-in), and one copy's log says it minted."""
    assert len(prod.control_plane) == 5
    token = wait_for(
        "the token minter's token in Key Vault",
        lambda: prod.attestation.vault().get(NODE_BOOTSTRAP_TOKEN),
        timeout=120,
        interval=2,
    )
    minted = prod.get_json("secrets", "-n", "kube-system", "-l", f"{MINTED_LABEL}={MINTED_BY}")["items"]
    assert [s["metadata"]["name"] for s in minted] == [f"bootstrap-token-{token.split('.', 1)[0]}"]
    logs = [processes[TOKEN_MINTER_UNIT].output() for _, _, processes in prod.control_plane]
    assert sum(log.count("token-minter: minted bootstrap-token-") for log in logs) == 1, logs


def _serving_request_decided_by(prod: Cluster) -> list[str]:
    """Sends a kubelet-serving request as the admin (never a node's to approve: every copy that decides denies it)
    and returns the apiserver hosts whose approver logged the decision."""
    csr_name = f"not-a-node-{uuid.uuid4().hex[:8]}"
    _, csr = node_csr("nobody", csr_name, KUBELET_SERVING_SIGNER, ["digital signature", "server auth"])
    prod.kubectl("create", "-f", "-", input=json.dumps(csr))
    wait_for(
        f"a decision on {csr_name}",
        lambda: prod.get_json("csr", csr_name).get("status", {}).get("conditions"),
        timeout=60,
        interval=1,
    )
    return [
        host.name
        for _, host, processes in prod.control_plane
        if f"csr-approver: {csr_name} (" in processes[CSR_APPROVER_UNIT].output()
    ]


def _lease_holder(prod: Cluster) -> str | None:
    lease = prod.get_json("lease", "-n", csr_approval.LEASE_NAMESPACE, csr_approval.LEASE)
    return (lease.get("spec") or {}).get("holderIdentity")


def test_one_of_five_approvers_decides_and_another_takes_over_when_it_stops(prod: Cluster):
    """The approvers' Lease (infra/control_plane/csr_approval.py): a request is decided by its holder's copy alone,
    so Resource Manager is read once per request, not five times. Its holder's process stopped, another copy takes
    the Lease once it has seen no renewal for a lease duration, and decides the next request alone."""
    hosts = {host.name: (machine, host, processes) for machine, host, processes in prod.control_plane}
    holder = wait_for("a holder of the approvers' Lease", lambda: _lease_holder(prod), timeout=60, interval=1)
    assert holder in hosts
    assert _serving_request_decided_by(prod) == [holder]
    machine, host, processes = hosts[holder]
    processes[CSR_APPROVER_UNIT].stop()
    try:
        took_over = wait_for(
            "another approver to take the Lease",
            lambda: (h := _lease_holder(prod)) != holder and h,
            timeout=csr_approval.lease_settings()["duration_seconds"] + 30,
            interval=1,
        )
        assert took_over in hosts
        assert _serving_request_decided_by(prod) == [took_over]
    finally:
        processes[CSR_APPROVER_UNIT] = start_unit(prod, machine, host, CSR_APPROVER_UNIT)


def test_every_machine_gets_a_token_from_imds_for_the_identity_it_carries(prod: Cluster):
    """Each machine's own token helper (``supercluster-imds-token``, as its boot scripts and programs run it) with its
    own identity file asks the IMDS stand-in, which answers only for an identity the plan attaches to that machine
    (tests/e2e/imds.py): a helper or identity file that names another identity fails here, as IMDS fails it."""
    machines = [(machine, host) for members in prod.etcd.values() for machine, host, _ in members]
    machines += [(machine, host) for machine, host, _ in prod.control_plane]
    machines += [(node.machine, node.host) for node in prod.nodes]  # the NAT hosts too
    assert {machine.resource for machine, _ in machines} >= {r.resource for r in prod.plan.vms()}
    failed = {}
    for machine, host in machines:
        prod.network.run(host, ["ip", "route", "replace", f"{IMDS_IP}/32", "dev", "eth0"])  # on-link, as on Azure
        asked = prod.network.run(
            host, ["env", "IMDS_ATTEMPTS=1", IMDS_TOKEN_SCRIPT, "https://vault.azure.net"], check=False
        )
        if asked.returncode != 0 or asked.stdout.strip() != imds.ACCESS_TOKEN:
            failed[machine.name] = asked.stderr.strip()[-200:]
    assert not failed, failed


def test_every_prod_workload_gets_its_pods_placed_on_the_booted_nodes(prod: Cluster):
    """prod's own workloads (every Prometheus shard's replicas, Alertmanager, kube-state-metrics, the
    autoscaler) get their pods bound, and every DaemonSet has a pod on every booted kind it is meant for
    (tests/e2e/placement.py): the GPU agents on the real GPU node too. Balloons are left out: they hold
    room for nodes the autoscaler would add (10 CPU nodes' worth here), and the box adds none."""
    try:
        wait_for(
            "every prod workload to have its pods placed",
            lambda: not unplaced(prod, running=False, skip_namespaces=(balloons.NAMESPACE,)),
            timeout=PLACE_SECONDS,
            interval=2,
        )
    except TimeoutError:
        pending = prod.kubectl("get", "pods", "-A", "--field-selector=status.phase=Pending", "-o", "wide").stdout
        pytest.fail("\n".join(unplaced(prod, running=False, skip_namespaces=(balloons.NAMESPACE,))) + "\n" + pending)


def _gpu_pod(name: str, node: str, image: str, tolerations: list[dict]) -> dict:
    """A researcher's one-GPU pod pinned to ``node`` as a tenant may pin it (by its hostname label)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"box": "one-gpu"}},
        "spec": {
            "nodeSelector": {HOSTNAME_LABEL: node},
            "tolerations": tolerations,
            "containers": [
                {
                    "name": "c",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "resources": {"limits": {GPU_RESOURCE: "1"}},
                }
            ],
        },
    }


def test_a_prod_gpu_node_runs_one_pod_per_gpu(prod: Cluster):
    """A researcher's 8 one-GPU pods all run on one real 8-GPU node beside the DaemonSets the plan puts
    there: kubelet's maxPods is the NIC's pod IPs plus the host-network DaemonSet pods, and the pods that
    take an IP (the DaemonSets' in ErrImagePull included: their sandboxes hold one) use exactly the NIC's
    pod IPs. The GPU health check's own scripts lift the start-up taint first, against stand-ins that pass;
    the node's GPUs are patched onto its status in place of the device plugin (tests/e2e/gpu_health.py)."""
    (real,) = prod.real_nodes
    (node,) = [n for n in prod.nodes if n.machine.name == real.machine.name]
    name, pool = node.machine.name, prod.spec.config.pool(node.pool)
    gpus = pool.size.gpus
    advertise_gpus(prod, node, gpus)
    selector = f"app.kubernetes.io/name={gpu_health_check.NAME}-{pool.name}"
    check_pod = pod_processes.bound_pod(prod, SYSTEM_NAMESPACE, selector=selector, node=name)
    check = HealthCheckPod(prod, node, check_pod, StandIns(prod.workdir / "gpu-health" / "stand-ins", gpus))
    check.start_node_taint()
    check.start_dcgm()
    wait_for(
        f"{name}'s start-up taint lifted",
        lambda: not has_startup_taint(prod, name),
        timeout=60,
        on_timeout=prod.describe,
    )

    # What the plan puts on a node of this kind: every DaemonSet meant for it, all placed there.
    kind = plan_node_kinds(prod)[kind_name(pool.name)]
    daemon_sets = [d for _, d in prod.plan.kubernetes_objects() if d["kind"] == "DaemonSet"]
    landing = [d for d in daemon_sets if runs_on(d["spec"]["template"]["spec"], kind.labels, kind.taints)]
    host_network = [d for d in landing if d["spec"]["template"]["spec"].get("hostNetwork")]
    assert kind.max_pods == pool.pod_ips_per_node + len(host_network)

    tolerations = [{"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect} for t in pool.taints]
    pods = [_gpu_pod(f"one-gpu-{i}", name, prod.box_images.pause.reference, tolerations) for i in range(gpus)]
    prod.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(pods))

    def on_node() -> list[dict]:
        return [p for p in prod.get_json("pods", "-A")["items"] if p["spec"].get("nodeName") == name]

    def running() -> int:
        return sum(
            1 for p in on_node() if p["metadata"]["name"].startswith("one-gpu-") and p["status"]["phase"] == "Running"
        )

    def scheduling() -> str:
        return prod.kubectl("get", "pods", "-A", "-o", "wide", "--field-selector", f"spec.nodeName={name}").stdout

    wait_for(f"{gpus} one-GPU pods running on {name}", lambda: running() == gpus, timeout=180, on_timeout=scheduling)
    placed = on_node()
    owners = sorted(p["metadata"]["ownerReferences"][0]["name"] for p in placed if p["metadata"].get("ownerReferences"))
    assert owners == sorted(d["metadata"]["name"] for d in landing), "the node runs exactly its DaemonSets' pods"
    assert len(placed) == kind.max_pods == int(prod.get_json("node", name)["status"]["allocatable"]["pods"])
    with_ip = [p for p in placed if not p["spec"].get("hostNetwork")]
    assert len(with_ip) == pool.pod_ips_per_node, scheduling()

    def addresses() -> set:
        return {p["status"].get("podIP") for p in on_node() if not p["spec"].get("hostNetwork")}

    # The one-GPU pods run within seconds; a DaemonSet pod's address appears once kubelet has built its
    # sandbox and reported it, which in CI took more than the 35 s its pods had by then (stop 34's run).
    wait_for(
        f"every pod on {name} that takes an IP to report one",
        lambda: None not in addresses(),
        timeout=SANDBOX_SECONDS,
        on_timeout=scheduling,
    )
    assert addresses() == set(real.pod_ips), scheduling()


def _write(prod: Cluster) -> bool:
    name = f"box-{uuid.uuid4().hex[:8]}"
    result = prod.kubectl("create", "configmap", name, "-n", "default", "--request-timeout=8s", check=False, timeout=30)
    return result.returncode == 0


@pytest.mark.restarts_expected(
    CONTROLLER_MANAGER_UNIT,
    SCHEDULER_UNIT,
    reason="with no etcd quorum the leaders cannot renew their leases, and exit to be restarted (by design)",
)
def test_losing_one_main_etcd_member_keeps_the_api_writable_and_losing_quorum_stops_writes(prod: Cluster):
    members = prod.etcd[MAIN]
    stopped = []
    try:
        members[0][2].stop()
        stopped.append(members[0])
        assert wait_for("a write with one of five members down", lambda: _write(prod), timeout=60)
        for member in members[1:3]:
            member[2].stop()
            stopped.append(member)
        # Three of five down: no quorum, so no write can commit ...
        assert not _write(prod)
        # ... and every apiserver's /readyz says its etcd check fails, so the load balancer drains it.
        for machine, _, _ in prod.control_plane:
            wait_for(
                f"{machine.name} /readyz to report etcd failing",
                lambda machine=machine: (
                    (r := prod.raw("/readyz?verbose", url=f"https://{machine.ip}:6443"))[0] != 200 and "[-]etcd" in r[1]
                ),
                timeout=90,
                interval=2,
            )
    finally:
        for index, (machine, host, _) in enumerate(members):
            if (machine, host) in [(m, h) for m, h, _ in stopped]:
                members[index] = (machine, host, start_unit(prod, machine, host, ETCD_UNIT))
    wait_for(
        "the API to be writable again once the members are back",
        lambda: _write(prod),
        timeout=120,
        interval=2,
        on_timeout=prod.describe,
    )
