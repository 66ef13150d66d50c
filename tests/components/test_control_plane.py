"""The control plane as declared by the real program under mocks: VMs, load balancer, secrets, rollout."""

from __future__ import annotations

import base64
import hashlib
import json
import time

from infra.boot.secret_names import APISERVER_ETCD_CLIENT_FILES, CLUSTER_CA_CERT, NODE_BOOTSTRAP_TOKEN
from infra.control_plane import cluster_objects, pki
from plan.artifacts import collect_files, custom_data_of
from tests.helpers import load_yaml, parsed
from tests.infra.control_plane_files import spec

CP = "prod-control-plane"
VM = "azure-native:compute:VirtualMachine"
EXTENSION = "azure-native:compute:VirtualMachineExtension"


def _apiserver_vms(plan):
    return [r for r in plan.of_type(VM) if r.name.startswith(f"{plan.stack}-control-plane-vm-")]


def test_prod_has_five_apiserver_vms_in_three_zones_with_planned_ips(prod_plan):
    vms = _apiserver_vms(prod_plan)
    assert [vm.inputs["vmName"] for vm in vms] == [f"prod-apiserver-{i}" for i in range(5)]
    assert sorted({vm.inputs["zones"][0] for vm in vms}) == ["1", "2", "3"]
    nics = [prod_plan.named(f"{CP}-vm-{i}-nic") for i in range(5)]
    ips = [nic.inputs["ipConfigurations"][0]["privateIPAddress"] for nic in nics]
    assert ips == list(spec("prod").addresses.apiserver_ips(5))
    assert all(nic.inputs["ipConfigurations"][0]["privateIPAllocationMethod"] == "Static" for nic in nics)
    assert {vm.inputs["hardwareProfile"]["vmSize"] for vm in vms} == {"Standard_E64ds_v5"}


def test_internal_standard_load_balancer_probes_readyz(prod_plan):
    (lb,) = [r for r in prod_plan.of_type("azure-native:network:LoadBalancer") if "control-plane" in r.name]
    inputs = lb.inputs
    assert inputs["sku"]["name"] == "Standard"
    (frontend,) = inputs["frontendIPConfigurations"]
    assert "publicIPAddress" not in frontend
    assert frontend["privateIPAddress"] == spec("prod").addresses.apiserver_lb_ip()
    assert frontend["zones"] == ["1", "2", "3"]
    (probe,) = inputs["probes"]
    assert (probe["protocol"], probe["port"], probe["requestPath"]) == ("Https", 6443, "/readyz")
    (rule,) = inputs["loadBalancingRules"]
    assert (rule["protocol"], rule["frontendPort"], rule["backendPort"]) == ("Tcp", 6443, 6443)
    assert rule["probe"]["id"].endswith("/probes/readyz")
    pool_id = rule["backendAddressPool"]["id"]
    for i in range(5):
        nic = prod_plan.named(f"{CP}-vm-{i}-nic")
        assert nic.inputs["ipConfigurations"][0]["loadBalancerBackendAddressPools"] == [{"id": pool_id}]


def test_apiservers_come_up_in_parallel_and_are_rolled_one_at_a_time_by_the_runbook(prod_plan):
    gates = [prod_plan.named(f"{CP}-ready-{i}") for i in range(5)]
    gate_urns = {g.urn for g in gates}
    for i, vm in enumerate(_apiserver_vms(prod_plan)):
        # `pulumi up` never applies a cloud-init change to all five at once ...
        assert "osProfile.customData" in vm.options["ignoreChanges"]
        # ... the runbook rolls one (destroy, then up): a replacement deletes first (fixed name and IP) ...
        assert vm.options["deleteBeforeReplace"] is True
        # ... and the NIC (static IP, load-balancer membership) outlives the VM it is attached to.
        assert vm.inputs["networkProfile"]["networkInterfaces"][0]["deleteOption"] == "Detach"
        component = prod_plan.named(f"{CP}-vm-{i}", "supercluster:machines:DedicatedVm")
        assert not gate_urns & set(component.options["dependsOn"]), "no VM waits for another apiserver"
        # The gate belongs to this VM (a property dependency, so it is replaced with it) ...
        assert vm.urn in gates[i].property_dependencies["vmName"]
        # ... and to nothing else the runbook's `destroy --target <vm> --target-dependents` could reach:
        # no other gate, no VM but its own (test below: the order between gates is kept all the same).
        others = (gate_urns | {v.urn for v in _apiserver_vms(prod_plan)}) - {vm.urn}
        assert not others & set(gates[i].dependencies)


def test_replacing_an_apiserver_reaches_its_gate_and_nothing_in_the_cluster(prod_plan):
    """What `pulumi destroy --target <apiserver VM> --target-dependents` would take: everything that
    depends on the VM (inputs, dependsOn, provider, parent), transitively: its readiness gate, nothing more."""
    dependents: dict[str, set[str]] = {}
    for r in prod_plan.registrations:
        for dependency in {
            *r.dependencies,
            *r.options["dependsOn"],
            *([r.parent] if r.parent else []),
            *([r.provider.split("::")[0]] if r.provider else []),
        }:
            dependents.setdefault(dependency, set()).add(r.urn)
    for i, vm in enumerate(_apiserver_vms(prod_plan)):
        reached, frontier = set(), [vm.urn]
        while frontier:
            for urn in dependents.get(frontier.pop(), ()):
                if urn not in reached:
                    reached.add(urn)
                    frontier.append(urn)
        assert {prod_plan.monitor.by_urn[urn].name for urn in reached} == {f"{CP}-ready-{i}"}, vm.name


def test_each_gate_and_the_provider_register_after_the_gate_before_them(monkeypatch):
    """The order Pulumi's graph does not hold: a gate is sent to the engine only once the previous gate
    has been answered (created, or updated for new secrets), and the kubernetes provider once the first
    has. The monitor holds each gate's answer back a little; without the order the next gate would
    arrive while it waits."""
    from plan import mocks
    from plan.runner import run_program
    from plan.stackfile import load_stack_config

    arrived, answered = {}, {}
    register = mocks.RecordingMonitor.RegisterResource

    def slow_gates(self, request):
        arrived[request.name] = time.monotonic()
        if request.name.startswith(f"{CP}-ready-"):
            time.sleep(0.05)
        response = register(self, request)
        answered[request.name] = time.monotonic()
        return response

    monkeypatch.setattr(mocks.RecordingMonitor, "RegisterResource", slow_gates)
    run_program("prod", load_stack_config("prod", []))
    for i in range(1, 5):
        assert arrived[f"{CP}-ready-{i}"] >= answered[f"{CP}-ready-{i - 1}"], i
    assert arrived[f"{CP}-k8s"] >= answered[f"{CP}-ready-0"]


def test_readiness_gate_waits_for_readyz_and_reruns_when_a_secret_changes(prod_plan):
    gate = prod_plan.named(f"{CP}-ready-0")
    assert gate.type == EXTENSION
    assert (gate.inputs["publisher"], gate.inputs["type"]) == ("Microsoft.Azure.Extensions", "CustomScript")
    assert "https://127.0.0.1:6443/readyz" in gate.inputs["settings"]["commandToExecute"]
    fetched = {f.secret_name for f in pki.apiserver_secret_files(pki.certificates())}
    secrets = {
        r.inputs["secretName"]: r.urn
        for r in prod_plan.of_type("azure-native:keyvault:Secret")
        if r.name.startswith(CP)
    }
    # Every secret the apiservers fetch re-runs the gate; the nodes' bootstrap token does not.
    assert set(gate.property_dependencies["forceUpdateTag"]) == {
        urn for name, urn in secrets.items() if name in fetched
    }
    assert secrets[NODE_BOOTSTRAP_TOKEN] not in gate.property_dependencies["forceUpdateTag"]


def _readers(plan) -> dict[str, set[str]]:
    """Key Vault secret name -> roles allowed to read it."""
    by_logical = {r.name: r.inputs["secretName"] for r in plan.of_type("azure-native:keyvault:Secret")}
    readers: dict[str, set[str]] = {name: set() for name in by_logical.values()}
    for assignment in plan.of_type("azure-native:authorization:RoleAssignment"):
        if not assignment.name.endswith("-reader"):
            continue  # not a Key Vault secret grant (registry pull, backup writes)
        logical = max((name for name in by_logical if assignment.name.startswith(f"{name}-")), key=len)
        readers[by_logical[logical]].add(assignment.name[len(logical) + 1 : -len("-reader")])
    return readers


def test_only_the_ca_certificate_and_token_are_readable_beyond_apiservers(prod_plan):
    readers = {k: v for k, v in _readers(prod_plan).items()}
    ours = pki.apiserver_secret_files(pki.certificates())
    etcd_owned = {f.secret_name for f in APISERVER_ETCD_CLIENT_FILES}
    for secret in ours:
        if secret.secret_name in etcd_owned:
            continue
        expected = {"apiserver", "node", "nat"} if secret.secret_name == CLUSTER_CA_CERT else {"apiserver"}
        assert readers[secret.secret_name] == expected, secret.secret_name
    assert readers[NODE_BOOTSTRAP_TOKEN] == {"node", "nat"}
    assert all(
        v == "[secret]"
        for r in prod_plan.of_type("azure-native:keyvault:Secret")
        for v in [r.inputs["properties"]["value"]]
    )


def test_every_fetched_secret_is_stored_by_the_control_plane_or_the_etcd_clusters(prod_plan):
    stored = {
        r.inputs["secretName"] for r in prod_plan.of_type("azure-native:keyvault:Secret") if r.name.startswith(CP)
    }
    fetched = {f.secret_name for f in pki.apiserver_secret_files(pki.certificates())}
    assert fetched - stored == {f.secret_name for f in APISERVER_ETCD_CLIENT_FILES}
    assert stored - fetched == {NODE_BOOTSTRAP_TOKEN}  # for nodes, not apiservers


def _mock_secret_values(plan) -> list[str]:
    """What the mocks generated for every secret the control plane holds (see plan/mocks.py)."""
    values = []
    for r in plan.registrations:
        if r.type.startswith("tls:") and r.type.endswith(":PrivateKey"):
            values.append(f"MOCK-{r.name}\n-----END PRIVATE KEY")
        elif r.type == "random:index/randomPassword:RandomPassword":
            values.append(hashlib.sha256(r.name.encode()).hexdigest()[: int(r.inputs["length"])])
        elif r.type == "random:index/randomBytes:RandomBytes":
            raw = hashlib.sha256(r.name.encode()).digest()[: int(r.inputs["length"])]
            values.append(base64.b64encode(raw).decode())
    return values


def test_nothing_secret_appears_in_the_plan(prod_plan):
    secrets = _mock_secret_values(prod_plan)
    assert len(secrets) >= 10  # 8 private keys, the token secret, the encryption key
    everything = json.dumps([r.as_json() for r in prod_plan.registrations]) + json.dumps(prod_plan.outputs)
    everything += "".join(collect_files(prod_plan.registrations).values())
    for vm in _apiserver_vms(prod_plan):
        everything += custom_data_of(vm)
    for value in secrets:
        assert value not in everything
    assert "PRIVATE KEY" not in everything


def test_no_output_or_resource_holds_a_masters_certificate_and_the_provider_names_a_command(prod_plan):
    """No system:masters certificate is issued, kept in state or exported: the deploy's kubernetes provider
    mints its own for hours on an apiserver VM (infra/control_plane/access.py, tests/plan/test_credential.py)."""
    contract = prod_plan.outputs["cluster"]
    assert "adminKubeconfig" not in contract
    assert contract["apiserver"]["endpoint"] == f"https://{spec('prod').addresses.apiserver_lb_ip()}:6443"
    assert "BEGIN CERTIFICATE" in contract["apiserver"]["caCertificate"]
    masters = [
        r.name
        for r in prod_plan.registrations
        if r.type.startswith("tls:") and "system:masters" in json.dumps(r.inputs.get("subject", {}))
    ]
    assert masters == []
    everything = json.dumps([r.as_json() for r in prod_plan.registrations]) + json.dumps(prod_plan.outputs)
    assert "client-key-data" not in everything and "client-certificate-data" not in everything
    provider = prod_plan.named(f"{CP}-k8s", "pulumi:providers:kubernetes")
    kubeconfig = load_yaml(provider.inputs["kubeconfig"])
    assert kubeconfig["clusters"][0]["cluster"]["server"] == contract["apiserver"]["endpoint"]
    (user,) = kubeconfig["users"]
    assert set(user["user"]) == {"exec"}
    args = user["user"]["exec"]["args"]
    assert args[:3] == ["-m", "plan.credential", "exec"]
    assert [args[i + 1] for i, a in enumerate(args) if a == "--vm"] == [
        vm.inputs["vmName"] for vm in _apiserver_vms(prod_plan)
    ]
    assert provider.inputs["clusterIdentifier"] == "prod"
    # It waits for the first readiness gate without depending on it (see the tests above).
    assert provider.options["dependsOn"] == []


def test_no_apiserver_serving_certificate_is_issued_into_state(prod_plan):
    """Each apiserver issues its own at boot (infra/control_plane/machine_identity.py): no key, certificate or
    Key Vault secret of it is declared, and the other leaf certificates still are."""
    names = {r.name for r in prod_plan.registrations}
    assert not {f"{CP}-pki-apiserver-csr", f"{CP}-pki-apiserver-cert", f"{CP}-pki-apiserver-key"} & names
    vault = {r.inputs["secretName"] for r in prod_plan.registrations if r.type == "azure-native:keyvault:Secret"}
    assert not {pki.cert_secret(pki.APISERVER), pki.key_secret(pki.APISERVER)} & vault
    assert prod_plan.named(f"{CP}-pki-controller-manager-cert").inputs["validityPeriodHours"] == 365 * 24
    front_proxy_client = prod_plan.named(f"{CP}-pki-front-proxy-client-cert")
    assert front_proxy_client.property_dependencies["caCertPem"] == [
        prod_plan.named(f"{CP}-pki-front-proxy-ca-cert").urn
    ]


def test_bootstrap_token_has_the_join_format(prod_plan):
    token_id = prod_plan.named(f"{CP}-bootstrap-token-id")
    token_secret = prod_plan.named(f"{CP}-bootstrap-token-secret")
    for resource, length in (
        (token_id, cluster_objects.TOKEN_ID_LENGTH),
        (token_secret, cluster_objects.TOKEN_SECRET_LENGTH),
    ):
        assert resource.inputs["length"] == length
        assert (resource.inputs["upper"], resource.inputs["special"]) == (False, False)


def test_cluster_bootstrap_objects(prod_plan):
    in_cluster = [
        r for r in prod_plan.registrations if r.type.startswith("kubernetes:") and r.name.startswith("prod-bootstrap-")
    ]
    assert len(in_cluster) == len(cluster_objects.cluster_objects(parsed("prod"))) + 1
    (token,) = [r for r in in_cluster if r.type == "kubernetes:core/v1:Secret"]
    # Each value masked, the shape kept: the planned Secret is still an object Kubernetes accepts.
    assert token.inputs["stringData"] == {key: "[secret]" for key in cluster_objects.bootstrap_token_data("a", "b")}
    assert token.inputs["type"] == "bootstrap.kubernetes.io/token"
    assert token.inputs["metadata"]["name"].startswith("bootstrap-token-")
    kinds = {r.inputs["kind"] for r in in_cluster}
    assert {"FlowSchema", "PriorityLevelConfiguration", "CustomResourceDefinition", "ClusterRoleBinding"} <= kinds


def test_dev_has_one_apiserver(dev_plan):
    assert len(_apiserver_vms(dev_plan)) == 1
    assert dev_plan.named("dev-control-plane-ready-0").options["dependsOn"] == []
