"""Certificate profiles of the etcd CAs, and the secrets each member fetches."""

from __future__ import annotations

from infra.boot.secret_names import ETCD_PKI_DIR, etcd_ca_cert, etcd_client_cas
from infra.etcd import certificates
from infra.etcd.spec import ROLES
from tests.etcd_specs import clusters


def test_server_and_peer_certificates_name_the_member_ip():
    _, main, _ = clusters()
    member = main.members[3]
    for profile in (certificates.server_profile(member), certificates.peer_profile(member)):
        assert profile.ip_addresses == (member.ip,)
        assert profile.dns_names == (member.name,)
        assert {"server_auth", "client_auth"} <= set(profile.allowed_uses)


def test_apiserver_client_certificate_is_a_client_only_identity():
    profile = certificates.apiserver_client_profile()
    assert "client_auth" in profile.allowed_uses and "server_auth" not in profile.allowed_uses
    assert profile.ip_addresses == () and profile.dns_names == ()


def test_each_ca_signs_and_outlives_its_leaves():
    cas = [certificates.ca_profile("prod", role) for role in ROLES] + [certificates.client_ca_profile("prod")]
    assert len({ca.common_name for ca in cas}) == len(cas)  # three CAs, not one
    assert cas[0].common_name == "prod etcd CA"  # the main cluster's keeps the shared CA's name
    for ca in cas:
        assert "cert_signing" in ca.allowed_uses
        assert ca.validity_hours > certificates.LEAF_VALIDITY_HOURS
        assert ca.early_renewal_hours == 0  # never silently re-issued
    assert 0 < certificates.LEAF_EARLY_RENEWAL_HOURS < certificates.LEAF_VALIDITY_HOURS


def test_each_member_fetches_its_own_clusters_trust_and_only_its_own_keys():
    _, main, events = clusters()
    member = main.members[1]
    files = {f.secret_name: f for f in certificates.member_secret_files(main, member)}
    assert set(files) == {
        etcd_ca_cert("etcd"),
        etcd_client_cas("etcd"),
        "prod-etcd-1-server-crt",
        "prod-etcd-1-server-key",
        "prod-etcd-1-peer-crt",
        "prod-etcd-1-peer-key",
    }
    assert all(f.path.startswith(ETCD_PKI_DIR + "/") for f in files.values())
    assert files["prod-etcd-1-server-key"].mode == files["prod-etcd-1-peer-key"].mode == "0600"
    assert certificates.member_secret_name(events.members[1], "peer", "key") == "prod-events-etcd-1-peer-key"
    events_files = {f.secret_name for f in certificates.member_secret_files(events, events.members[1])}
    assert {etcd_ca_cert("events-etcd"), etcd_client_cas("events-etcd")} <= events_files
    assert not events_files & {etcd_ca_cert("etcd"), etcd_client_cas("etcd")}


def test_a_bundle_holds_each_certificate_on_lines_of_its_own():
    assert certificates.bundle("A\n", "B") == "A\nB\n"
