"""Members, addresses, zones, and the apiserver's flags for both etcd clusters."""

from __future__ import annotations

from infra.boot.secret_names import APISERVER_ETCD_CLIENT_FILES
from infra.etcd.spec import apiserver_etcd_flags, etcd_servers, events_override
from tests.etcd_specs import clusters


def test_prod_has_five_main_and_three_events_members_on_their_planned_addresses():
    spec, main, events = clusters()
    assert [m.name for m in main.members] == [f"prod-etcd-{i}" for i in range(5)]
    assert [m.name for m in events.members] == [f"prod-events-etcd-{i}" for i in range(3)]
    assert tuple(m.ip for m in main.members) == spec.addresses.etcd_ips("etcd", 5)
    assert tuple(m.ip for m in events.members) == spec.addresses.etcd_ips("events-etcd", 3)
    assert not set(main.client_urls) & set(events.client_urls)


def test_members_are_spread_round_robin_over_three_zones():
    _, main, events = clusters()
    assert [m.zone for m in main.members] == ["1", "2", "3", "1", "2"]
    assert [m.zone for m in events.members] == ["1", "2", "3"]


def test_growing_a_cluster_keeps_every_existing_member_as_it_was():
    _, three, _ = clusters(members=3)
    _, five, _ = clusters(members=5)
    assert five.members[:3] == three.members


def test_urls_and_tokens():
    _, main, events = clusters()
    first = main.members[0]
    assert (first.client_url, first.peer_url, first.metrics_url) == (
        "https://10.0.0.4:2379",
        "https://10.0.0.4:2380",
        "http://10.0.0.4:2381",
    )
    assert main.initial_cluster.split(",")[0] == "prod-etcd-0=https://10.0.0.4:2380"
    assert len(main.initial_cluster.split(",")) == 5
    assert main.token != events.token  # two clusters that can never merge


def test_apiserver_flags_point_at_both_clusters():
    _, main, events = clusters()
    flags = apiserver_etcd_flags(main, events)
    assert flags["etcd-servers"] == ",".join(f"https://10.0.0.{4 + i}:2379" for i in range(5))
    # The 2,500-node post's format: /events#url;url;url, exactly the Events members.
    assert flags["etcd-servers-overrides"] == "/events#" + ";".join(events.client_urls)
    assert flags["etcd-servers-overrides"].split("#")[1].split(";") == events.client_urls
    assert flags["etcd-servers"] == etcd_servers(main) and flags["etcd-servers-overrides"] == events_override(events)
    # etcd owns compaction, so the apiserver's compactor is off.
    assert flags["etcd-compaction-interval"] == "0"
    paths = {f.path for f in APISERVER_ETCD_CLIENT_FILES}
    assert {flags["etcd-cafile"], flags["etcd-certfile"], flags["etcd-keyfile"]} == paths
