"""prod's control-plane shape booted on the real binaries: 5 + 3 etcd members, several apiservers."""

from __future__ import annotations

import uuid

import pytest
import yaml

from infra.control_plane.paths import CONTROLLER_MANAGER_UNIT, SCHEDULER_UNIT
from infra.etcd.spec import EVENTS, MAIN, etcd_cluster_spec
from tests.e2e.cluster import APISERVER_UNIT, ETCD_UNIT, Cluster, start_unit
from tests.e2e.hosts import wait_for

pytestmark = pytest.mark.e2e


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
