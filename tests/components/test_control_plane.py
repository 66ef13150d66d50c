"""The control plane as declared by the real program under mocks: the apiserver scale set (its repair and rolling
policies), the load balancer, secrets, and a stack moving to the scale set from its apiserver VMs."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import string
import time

import pytest

from components import secret_store
from infra.assembly.desired_cluster import assemble
from infra.boot.secret_names import APISERVER_ETCD_CLIENT_FILES, CLUSTER_CA_CERT, NODE_BOOTSTRAP_TOKEN
from infra.config.errors import ConfigError
from infra.control_plane import cluster_objects, pki, scale_set, token_minting
from infra.day2.deploy_rules import APISERVER_ROLE, APISERVER_SCALE_SET_RECORD, ROLLOUT_OUTPUT
from plan.artifacts import collect_files, custom_data_of
from plan.runner import own_stack_name, run_program
from plan.stackfile import load_stack_config
from tests.helpers import load_yaml, parsed, raw_stack
from tests.infra.control_plane_files import spec

CP = "prod-control-plane"
VM = "azure-native:compute:VirtualMachine"
VMSS = "azure-native:compute:VirtualMachineScaleSet"
EXTENSION = "azure-native:compute:VirtualMachineExtension"


def _apiserver_vms(plan):
    return [r for r in plan.of_type(VM) if r.name.startswith(f"{plan.stack}-control-plane-vm-")]


def _scale_set(plan):
    return plan.named(f"{plan.stack}-control-plane-apiservers", VMSS)


def _extensions(scale_set) -> dict[str, dict]:
    return {e["name"]: e for e in scale_set.inputs["virtualMachineProfile"]["extensionProfile"]["extensions"]}


def test_prod_has_five_apiservers_in_one_scale_set_over_three_zones_in_the_load_balancers_pool(prod_plan):
    assert _apiserver_vms(prod_plan) == []
    scale_set = _scale_set(prod_plan).inputs
    assert scale_set["vmScaleSetName"] == "prod-apiservers"
    assert scale_set["sku"] == {"name": "Standard_E64ds_v5", "tier": "Standard", "capacity": 5}
    assert scale_set["zones"] == ["1", "2", "3"]
    assert (scale_set["orchestrationMode"], scale_set["overprovision"]) == ("Uniform", False)
    (nic,) = scale_set["virtualMachineProfile"]["networkProfile"]["networkInterfaceConfigurations"]
    (ip,) = nic["ipConfigurations"]
    assert ip["subnet"]["id"].endswith("/subnets/apiserver")
    (lb,) = [r for r in prod_plan.of_type("azure-native:network:LoadBalancer") if "control-plane" in r.name]
    assert ip["loadBalancerBackendAddressPools"] == [
        {"id": lb.inputs["loadBalancingRules"][0]["backendAddressPool"]["id"]}
    ]
    # Its first instance takes an address once the frontend holds its static one (the subnet's first).
    assert lb.urn in _scale_set(prod_plan).options["dependsOn"]
    assert _scale_set(prod_plan).options["protect"] is True  # replacing it takes every apiserver at once


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


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_no_deploy_restarts_more_than_one_apiserver_the_rendered_rolling_policy_says_so(stack, dev_plan, prod_plan):
    """A model change reaches one instance per batch, the next only once it is healthy, and an unhealthy
    upgraded instance stops the rollout: read from what the plan sends Azure."""
    inputs = _scale_set({"dev": dev_plan, "prod": prod_plan}[stack]).inputs
    capacity, policy = inputs["sku"]["capacity"], inputs["upgradePolicy"]
    assert policy["mode"] == "Rolling"
    rolling = policy["rollingUpgradePolicy"]
    assert rolling["maxBatchInstancePercent"] * capacity <= 100 or capacity == 1  # one instance per batch
    assert scale_set.batch_instances(rolling["maxBatchInstancePercent"], capacity) == 1
    assert rolling["maxUnhealthyInstancePercent"] * capacity <= 100 or capacity == 1  # none while another is down
    assert rolling["maxUnhealthyUpgradedInstancePercent"] == 0
    assert rolling["pauseTimeBetweenBatches"] == "PT1M"
    # What gates each batch is the health extension, on the apiserver's liveness without etcd.
    health = _extensions(_scale_set({"dev": dev_plan, "prod": prod_plan}[stack]))["apiserver-health"]
    assert (health["publisher"], health["type"]) == ("Microsoft.ManagedServices", "ApplicationHealthLinux")
    assert {k: health["settings"][k] for k in ("protocol", "port", "requestPath")} == {
        "protocol": "https",
        "port": 6443,
        "requestPath": "/livez?exclude=etcd",
    }


@pytest.mark.parametrize("capacity", range(1, 16))
def test_every_apiserver_count_the_config_allows_rolls_one_instance_at_a_time(capacity):
    percent = scale_set.one_instance_percent(capacity)
    assert 5 <= percent <= 100  # Azure's bounds for maxBatchInstancePercent
    assert scale_set.batch_instances(percent, capacity) == 1


def test_a_lost_apiserver_is_replaced_by_azure_on_livez_without_etcd(prod_plan):
    inputs = _scale_set(prod_plan).inputs
    assert inputs["automaticRepairsPolicy"] == {"enabled": True, "gracePeriod": "PT30M", "repairAction": "Replace"}
    # Only one health source for repairs (Azure: the extension or a load balancer probe, not both).
    assert "healthProbe" not in inputs["virtualMachineProfile"]["networkProfile"]
    health = _extensions(_scale_set(prod_plan))["apiserver-health"]
    assert health["provisionAfterExtensions"] == ["apiserver-ready"]


def test_readiness_extension_waits_for_readyz_and_reruns_when_a_secret_changes(prod_plan):
    scale_set_run = _scale_set(prod_plan)
    ready = _extensions(scale_set_run)["apiserver-ready"]
    assert (ready["publisher"], ready["type"]) == ("Microsoft.Azure.Extensions", "CustomScript")
    assert "https://127.0.0.1:6443/readyz" in ready["settings"]["commandToExecute"]
    fetched = {f.secret_name for f in pki.apiserver_secret_files(pki.certificates())}
    secrets = {
        r.inputs["secretName"]: r.urn
        for r in prod_plan.of_type("azure-native:keyvault:Secret")
        if r.name.startswith(CP)
    }
    # Every secret the apiservers fetch changes its forceUpdateTag (a model change, rolled); the token does not.
    profile = set(scale_set_run.property_dependencies["virtualMachineProfile"])
    assert {urn for name, urn in secrets.items() if name in fetched} <= profile
    assert secrets[NODE_BOOTSTRAP_TOKEN] not in profile


def _outputs_with_vms(plan, count: int) -> dict:
    """``plan``'s outputs as a deploy before the scale set wrote them: ``count`` apiserver VMs, each recorded."""
    outputs = copy.deepcopy(plan.outputs)
    rollout = outputs[ROLLOUT_OUTPUT]
    model = rollout.pop(APISERVER_SCALE_SET_RECORD)
    rollout["machines"][APISERVER_ROLE] = [{**model, "name": f"{plan.stack}-apiserver-{i}"} for i in range(count)]
    return outputs


@pytest.fixture(scope="module")
def moving(prod_plan):
    """prod's first deploy with the scale set, after a deploy that had five apiserver VMs."""
    return run_program("prod", load_stack_config("prod", []), {own_stack_name("prod"): _outputs_with_vms(prod_plan, 5)})


@pytest.mark.slow  # seconds: prod planned again after a deploy with five apiserver VMs
def test_a_stack_with_apiserver_vms_keeps_them_beside_the_new_scale_set(moving):
    vms = _apiserver_vms(moving)
    assert [vm.inputs["vmName"] for vm in vms] == [f"prod-apiserver-{i}" for i in range(5)]
    assert _scale_set(moving).inputs["sku"]["capacity"] == 5
    nics = [moving.named(f"{CP}-vm-{i}-nic") for i in range(5)]
    assert [n.inputs["ipConfigurations"][0]["privateIPAddress"] for n in nics] == list(
        spec("prod").addresses.apiserver_ips(5)
    )
    pool = _scale_set(moving).inputs["virtualMachineProfile"]["networkProfile"]["networkInterfaceConfigurations"]
    for nic in nics:  # the same backend pool as the instances
        assert (
            nic.inputs["ipConfigurations"][0]["loadBalancerBackendAddressPools"]
            == (pool[0]["ipConfigurations"][0]["loadBalancerBackendAddressPools"])
        )
    for vm in vms:  # each kept as it runs: no new cloud-init or image reaches it
        assert {"osProfile.customData", "storageProfile.imageReference"} <= set(vm.options["ignoreChanges"])
    assert [r["name"] for r in moving.outputs[ROLLOUT_OUTPUT]["machines"][APISERVER_ROLE]] == [
        f"prod-apiserver-{i}" for i in range(5)
    ]


@pytest.mark.slow  # five deploys of prod planned in sequence
def test_each_later_deploy_retires_one_apiserver_vm_the_last_first(moving):
    names, run = [], moving
    for _ in range(5):
        run = run_program("prod", load_stack_config("prod", []), {own_stack_name("prod"): run.outputs})
        names.append([vm.inputs["vmName"] for vm in _apiserver_vms(run)])
    assert names == [[f"prod-apiserver-{i}" for i in range(n)] for n in (4, 3, 2, 1, 0)]
    assert run.outputs[ROLLOUT_OUTPUT]["machines"][APISERVER_ROLE] == []


def test_a_move_that_does_not_fit_beside_the_vms_is_refused_with_one_line(prod_plan):
    """13 VMs and 15 instances in one /27 (26 addresses once Azure's 5 and the frontend are taken): refused."""
    raw = raw_stack("prod")
    raw["controlPlane"]["apiservers"] = 15
    with pytest.raises(ConfigError, match=r"controlPlane.apiservers = 15: .*at most 13 while the stack moves"):
        assemble(raw, "eastus", _outputs_with_vms(prod_plan, 13))
    assert assemble(raw, "eastus", _outputs_with_vms(prod_plan, 11)).apiservers.capacity == 15


@pytest.mark.slow  # seconds: prod planned again after a deploy with five apiserver VMs
def test_replacing_a_retiring_apiserver_vm_reaches_its_gate_and_nothing_in_the_cluster(moving):
    """What `pulumi destroy --target <apiserver VM> --target-dependents` would take: everything that
    depends on the VM (inputs, dependsOn, provider, parent), transitively: its readiness gate, nothing more."""
    dependents: dict[str, set[str]] = {}
    for r in moving.registrations:
        for dependency in {
            *r.dependencies,
            *r.options["dependsOn"],
            *([r.parent] if r.parent else []),
            *([r.provider.split("::")[0]] if r.provider else []),
        }:
            dependents.setdefault(dependency, set()).add(r.urn)
    for i, vm in enumerate(_apiserver_vms(moving)):
        reached, frontier = set(), [vm.urn]
        while frontier:
            for urn in dependents.get(frontier.pop(), ()):
                if urn not in reached:
                    reached.add(urn)
                    frontier.append(urn)
        assert {moving.monitor.by_urn[urn].name for urn in reached} == {f"{CP}-ready-{i}"}, vm.name


@pytest.mark.slow  # seconds: prod planned with the monitor holding each answer back
def test_each_retiring_gate_registers_after_the_gate_before_it_and_the_provider_after_the_scale_set(
    monkeypatch, prod_plan
):
    """The order Pulumi's graph does not hold: a gate is sent to the engine only once the previous gate has
    been answered, and the kubernetes provider once the scale set has. The monitor holds each answer back a
    little; without the order the next would arrive while it waits."""
    from plan import mocks

    arrived, answered = {}, {}
    register = mocks.RecordingMonitor.RegisterResource

    def slow(self, request):
        arrived[request.name] = time.monotonic()
        if request.name.startswith(f"{CP}-ready-") or request.name == f"{CP}-apiservers":
            time.sleep(0.05)
        response = register(self, request)
        answered[request.name] = time.monotonic()
        return response

    monkeypatch.setattr(mocks.RecordingMonitor, "RegisterResource", slow)
    run_program("prod", load_stack_config("prod", []), {own_stack_name("prod"): _outputs_with_vms(prod_plan, 5)})
    for i in range(1, 5):
        assert arrived[f"{CP}-ready-{i}"] >= answered[f"{CP}-ready-{i - 1}"], i
    assert arrived[f"{CP}-k8s"] >= answered[f"{CP}-apiservers"]


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


def test_only_the_apiservers_may_write_and_only_the_node_token_whose_value_the_program_sets_once(prod_plan):
    """The token minter on the apiservers (infra/control_plane/token_minting.py) writes each next bootstrap token:
    the apiserver identity is Key Vault Secrets Officer on that one secret, no identity writes any other, and the
    program's value is the first only (a `pulumi up` never rolls back the minted one)."""
    secrets = {r.name: r for r in prod_plan.of_type("azure-native:keyvault:Secret")}
    officer = "/providers/Microsoft.Authorization/roleDefinitions/" + secret_store.KEY_VAULT_SECRETS_OFFICER_ROLE
    on_secrets = [
        a
        for a in prod_plan.of_type("azure-native:authorization:RoleAssignment")
        if any(s.urn in a.dependencies for s in secrets.values())
    ]
    writers = [
        a for a in on_secrets if not a.inputs["roleDefinitionId"].endswith(secret_store.KEY_VAULT_SECRETS_USER_ROLE)
    ]
    assert [a.name for a in writers] == [f"{CP}-{NODE_BOOTSTRAP_TOKEN}-apiserver-writer"]
    (writer,) = writers
    assert writer.inputs["roleDefinitionId"].endswith(officer)
    token = secrets[f"{CP}-{NODE_BOOTSTRAP_TOKEN}"]
    assert token.urn in writer.dependencies  # scoped to the secret itself, not the vault
    assert token.options["ignoreChanges"] == ["properties.value"]
    assert [r.name for r in secrets.values() if r.options["ignoreChanges"]] == [token.name]


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
    everything += custom_data_of(_scale_set(prod_plan))
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
    assert [args[i + 1] for i, a in enumerate(args) if a == "--scale-set"] == ["prod-apiservers"]
    assert "--vm" not in args
    assert provider.inputs["clusterIdentifier"] == "prod"
    # It waits for the scale set without depending on it (see the tests above).
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
        (token_id, token_minting.TOKEN_ID_LENGTH),
        (token_secret, token_minting.TOKEN_SECRET_LENGTH),
    ):
        assert resource.inputs["length"] == length
        # The random provider's classes (lower case, digits) are exactly the alphabet the minter draws from.
        classes = {"lower": string.ascii_lowercase, "numeric": string.digits, "upper": string.ascii_uppercase}
        drawn = "".join(chars for key, chars in classes.items() if resource.inputs[key])
        assert drawn == token_minting.TOKEN_ALPHABET and resource.inputs["special"] is False
        # A stack whose first token never expired gets a new one, which does (components/control_plane.py).
        assert resource.inputs["keepers"] == {"lifetimeSeconds": str(token_minting.LIFETIME_SECONDS)}


def test_cluster_bootstrap_objects(prod_plan):
    in_cluster = [
        r for r in prod_plan.registrations if r.type.startswith("kubernetes:") and r.name.startswith("prod-bootstrap-")
    ]
    assert len(in_cluster) == len(cluster_objects.cluster_objects(parsed("prod"))) + 1
    (token,) = [r for r in in_cluster if r.type == "kubernetes:core/v1:Secret"]
    # Each value masked, the shape kept: the planned Secret is still an object Kubernetes accepts. It expires.
    assert "expiration" in token.inputs["stringData"]
    assert token.inputs["stringData"] == {
        key: "[secret]" for key in token_minting.bootstrap_token_data("a", "b", "2026-11-28T09:00:00Z")
    }
    # Set once: a later `pulumi up` neither extends the first token's life nor rewrites it.
    assert token.options["ignoreChanges"] == ["stringData"]
    assert token.inputs["type"] == "bootstrap.kubernetes.io/token"
    assert token.inputs["metadata"]["name"].startswith("bootstrap-token-")
    kinds = {r.inputs["kind"] for r in in_cluster}
    assert {"FlowSchema", "PriorityLevelConfiguration", "CustomResourceDefinition", "ClusterRoleBinding"} <= kinds


def test_dev_has_one_apiserver(dev_plan):
    assert _apiserver_vms(dev_plan) == []
    assert _scale_set(dev_plan).inputs["sku"]["capacity"] == 1
