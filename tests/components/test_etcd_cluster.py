"""Both etcd clusters, the etcd PKI and the backup account, as the real program declares them (mocks)."""

from __future__ import annotations

import base64
import json

import pytest

from infra.boot.secret_names import (
    APISERVER_ETCD_CAS,
    APISERVER_ETCD_CLIENT_CERT,
    APISERVER_ETCD_CLIENT_KEY,
    etcd_ca_cert,
    etcd_client_cas,
)
from infra.catalog.vm_sizes import VM_SIZES
from infra.etcd.backup import RETENTION_DAYS, SOFT_DELETE_DAYS, storage_account_name
from plan.artifacts import collect_files, custom_data_of, file_content
from plan.mocks import SECRET
from tests.conftest import plan_stack
from tests.etcd_specs import clusters
from tests.helpers import load_yaml

VM = "azure-native:compute:VirtualMachine"
NIC = "azure-native:network:NetworkInterface"
SECRET_TYPE = "azure-native:keyvault:Secret"
ROLE_ASSIGNMENT = "azure-native:authorization:RoleAssignment"
IDENTITY = "azure-native:managedidentity:UserAssignedIdentity"
STORAGE_BLOB_DATA_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
KEY_VAULT_SECRETS_USER = "4633458b-17de-408a-b874-0445c86b69e6"


def etcd_vms(run, role):
    cluster = run.named(f"{run.stack}-{role}", "supercluster:etcd:EtcdCluster")
    members = [
        r for r in run.registrations if r.parent == cluster.urn and r.type == "supercluster:machines:DedicatedVm"
    ]
    return [next(r for r in run.of_type(VM) if r.parent == member.urn) for member in members]


def identity_of(run, role):
    return run.named(f"{run.stack}-id-{role}", IDENTITY)


def readers_of(run, secret):
    """Principal IDs granted read on a Key Vault secret, by the role assignments that depend on it."""
    return {
        r.inputs["principalId"]
        for r in run.of_type(ROLE_ASSIGNMENT)
        if secret.urn in r.dependencies and r.inputs["roleDefinitionId"].endswith(KEY_VAULT_SECRETS_USER)
    }


def _principal_ids(run):
    """The mock derives principal IDs from identity names; read them back from any role assignment."""
    ids = {}
    for r in run.of_type(ROLE_ASSIGNMENT):
        for dependency in r.dependencies:
            if "UserAssignedIdentity::" in dependency:
                ids[dependency.rsplit("-id-", 1)[1]] = r.inputs["principalId"]
    return ids


def test_prod_has_five_plus_three_members_on_sizes_with_local_disk(prod_plan):
    _, main, events = clusters("prod")
    for role, spec in (("etcd", main), ("events-etcd", events)):
        vms = etcd_vms(prod_plan, role)
        assert [vm.inputs["vmName"] for vm in vms] == [m.name for m in spec.members]
        assert all(VM_SIZES[vm.inputs["hardwareProfile"]["vmSize"]].has_local_disk for vm in vms)
    assert len(etcd_vms(prod_plan, "etcd")) == 5 and len(etcd_vms(prod_plan, "events-etcd")) == 3


def test_members_are_protected_keep_their_cloud_init_and_spread_over_zones(prod_plan):
    for role in ("etcd", "events-etcd"):
        vms = etcd_vms(prod_plan, role)
        assert all(vm.options["protect"] for vm in vms)
        assert all("osProfile.customData" in vm.options["ignoreChanges"] for vm in vms)
        # A resize would restart every member at once onto a blank NVMe: declared a replacement, which protect stops.
        assert all(vm.options["replaceOnChanges"] == ["hardwareProfile.vmSize"] for vm in vms)
        assert [vm.inputs["zones"] for vm in vms] == [["1"], ["2"], ["3"], ["1"], ["2"]][: len(vms)]
        nics = [r for r in prod_plan.of_type(NIC) if any(r.parent == vm.parent for vm in vms)]
        assert len(nics) == len(vms) and all(nic.options["protect"] for nic in nics)


def test_members_have_static_addresses_in_their_own_subnet(prod_plan):
    _, main, events = clusters("prod")
    for role, spec in (("etcd", main), ("events-etcd", events)):
        vms = etcd_vms(prod_plan, role)
        nics = [next(r for r in prod_plan.of_type(NIC) if r.parent == vm.parent) for vm in vms]
        assert [nic.inputs["ipConfigurations"][0]["privateIPAddress"] for nic in nics] == [m.ip for m in spec.members]
        assert all(nic.inputs["ipConfigurations"][0]["privateIPAllocationMethod"] == "Static" for nic in nics)
        vnet = prod_plan.named("prod-system", "azure-native:network:VirtualNetwork")
        assert all(nic.inputs["ipConfigurations"][0]["subnet"]["id"] == f"{vnet.id}/subnets/{role}" for nic in nics)
        assert all(vnet.urn in nic.dependencies for nic in nics)


def test_members_run_as_their_role_identity(prod_plan):
    for role in ("etcd", "events-etcd"):
        identity_id = identity_of(prod_plan, role).id
        assert all(vm.inputs["identity"]["userAssignedIdentities"] == [identity_id] for vm in etcd_vms(prod_plan, role))


def test_cloud_init_carries_no_secret_and_is_the_members_own(prod_plan):
    _, main, _ = clusters("prod")
    for vm, member in zip(etcd_vms(prod_plan, "etcd"), main.members, strict=True):
        text = base64.b64decode(vm.inputs["osProfile"]["customData"]).decode()
        assert "PRIVATE KEY" not in text and SECRET not in text
        files = {f["path"]: file_content(f) for f in load_yaml(text)["write_files"]}
        assert load_yaml(files["/etc/etcd/etcd.yaml"])["advertise-client-urls"] == member.client_url
        assert text == custom_data_of(vm)


def test_every_member_key_is_in_key_vault_for_its_role_only(prod_plan):
    ids = _principal_ids(prod_plan)
    secrets = {r.inputs["secretName"]: r for r in prod_plan.of_type(SECRET_TYPE)}
    for role, count in (("etcd", 5), ("events-etcd", 3)):
        for i in range(count):
            for kind in ("server", "peer"):
                for part in ("crt", "key"):
                    secret = secrets[f"prod-{role}-{i}-{kind}-{part}"]
                    assert secret.inputs["properties"]["value"] == SECRET
                    assert readers_of(prod_plan, secret) == {ids[role]}


def test_each_etcd_cluster_and_the_apiserver_client_have_a_ca_of_their_own(prod_plan):
    ids = _principal_ids(prod_plan)
    secrets = {r.inputs["secretName"]: r for r in prod_plan.of_type(SECRET_TYPE)}
    for role in ("etcd", "events-etcd"):
        for name in (etcd_ca_cert(role), etcd_client_cas(role)):
            assert readers_of(prod_plan, secrets[name]) == {ids[role]}
    for name in (APISERVER_ETCD_CAS, APISERVER_ETCD_CLIENT_CERT, APISERVER_ETCD_CLIENT_KEY):
        assert readers_of(prod_plan, secrets[name]) == {ids["apiserver"]}
    # The main cluster's CA keeps the logical names of the CA both clusters shared before.
    for prefix in ("prod-etcd-pki", "prod-etcd-pki-events-etcd", "prod-etcd-pki-client"):
        ca_key, ca_cert = prod_plan.named(f"{prefix}-ca-key"), prod_plan.named(f"{prefix}-ca-cert")
        assert ca_key.options["protect"] and ca_cert.options["protect"]
        assert ca_cert.inputs["isCaCertificate"] is True
    client = prod_plan.named("prod-etcd-pki-apiserver-client-cert")
    assert "client_auth" in client.inputs["allowedUses"] and "server_auth" not in client.inputs["allowedUses"]
    assert client.inputs["caPrivateKeyPem"] == SECRET
    assert "tls:index/selfSignedCert:SelfSignedCert::prod-etcd-pki-client-ca-cert" in " ".join(client.dependencies)


def test_member_certificates_name_the_member_ip(prod_plan):
    _, main, events = clusters("prod")
    for spec in (main, events):
        for member in spec.members:
            for kind in ("server", "peer"):
                request = prod_plan.named(f"prod-{spec.role}-{member.index}-{kind}-csr")
                assert request.inputs["ipAddresses"] == [member.ip]
                assert request.inputs["privateKeyPem"] == SECRET
                cert = prod_plan.named(f"prod-{spec.role}-{member.index}-{kind}-cert")
                signer = "prod-etcd-pki-ca-cert" if spec.role == "etcd" else f"prod-etcd-pki-{spec.role}-ca-cert"
                cas = {d.rsplit("::", 1)[-1] for d in cert.dependencies if "SelfSignedCert" in d}
                assert cas == {signer}, (cert.name, cas)


def test_backup_account_is_private_keyless_versioned_and_protected(prod_plan):
    account = prod_plan.named("prod-etcd-backup-store-account")
    assert account.options["protect"]
    inputs = account.inputs
    assert inputs["accountName"] == storage_account_name("prod")
    assert inputs["allowSharedKeyAccess"] is False and inputs["publicNetworkAccess"] == "Disabled"
    assert inputs["allowBlobPublicAccess"] is False and inputs["networkRuleSet"]["defaultAction"] == "Deny"
    service = prod_plan.named("prod-etcd-backup-store-blob-service").inputs
    assert service["isVersioningEnabled"] is True
    assert service["deleteRetentionPolicy"] == {"enabled": True, "days": SOFT_DELETE_DAYS}
    assert service["containerDeleteRetentionPolicy"] == {"enabled": True, "days": SOFT_DELETE_DAYS}
    rule = prod_plan.named("prod-etcd-backup-store-lifecycle").inputs["policy"]["rules"][0]["definition"]["actions"]
    assert rule["baseBlob"]["delete"]["daysAfterModificationGreaterThan"] == RETENTION_DAYS
    endpoint = prod_plan.named("prod-etcd-backup-store-endpoint").inputs
    assert endpoint["privateLinkServiceConnections"][0]["groupIds"] == ["blob"]
    assert (
        endpoint["privateLinkServiceConnections"][0]["privateLinkServiceId"]
        == prod_plan.named("prod-etcd-backup-store-account").id
    )


@pytest.mark.parametrize("role", ["etcd", "events-etcd"])
def test_each_cluster_writes_only_its_own_retained_container(prod_plan, role):
    container = prod_plan.named(f"prod-{role}-backup-container")
    assert container.inputs["containerName"] == role and container.inputs["publicAccess"] == "None"
    assert container.options["retainOnDelete"] and container.options["protect"]
    (writer,) = [
        r
        for r in prod_plan.of_type(ROLE_ASSIGNMENT)
        if r.inputs["scope"] == container.id and container.urn in r.dependencies
    ]
    assert writer.inputs["roleDefinitionId"].endswith(STORAGE_BLOB_DATA_CONTRIBUTOR)
    assert writer.inputs["principalId"] == _principal_ids(prod_plan)[role]
    account_id = prod_plan.named("prod-etcd-backup-store-account").id
    assert not [r for r in prod_plan.of_type(ROLE_ASSIGNMENT) if r.inputs["scope"] == account_id]


def test_both_endpoint_lists_are_exported(prod_plan):
    _, main, events = clusters("prod")
    assert prod_plan.outputs["etcdClientUrls"] == main.client_urls
    assert prod_plan.outputs["eventsEtcdClientUrls"] == events.client_urls


def test_no_private_key_anywhere_in_the_plan(prod_plan):
    resources = json.dumps([r.as_json() for r in prod_plan.registrations])
    files = json.dumps(collect_files(prod_plan.registrations))
    outputs = json.dumps(prod_plan.outputs)
    for text in (resources, files, outputs):
        assert "PRIVATE KEY" not in text


@pytest.mark.slow  # a sequence of whole-program runs (seconds)
def test_a_cloud_init_change_neither_replaces_nor_rewrites_a_member(dev_plan):
    """A new quota changes what a member would receive: the VM sees it only in the fingerprint tag."""
    changed = plan_stack("dev", "etcd.quotaBackendBytes=17179869184")
    before, after = etcd_vms(dev_plan, "etcd")[0], etcd_vms(changed, "etcd")[0]
    assert before.inputs["osProfile"]["customData"] != after.inputs["osProfile"]["customData"]
    assert "osProfile.customData" in after.options["ignoreChanges"]

    def without_cloud_init(vm):
        return {**vm.inputs, "osProfile": {**vm.inputs["osProfile"], "customData": None}, "tags": None}

    assert without_cloud_init(before) == without_cloud_init(after)
    assert before.inputs["tags"]["supercluster.io_cloud-init"] != after.inputs["tags"]["supercluster.io_cloud-init"]
