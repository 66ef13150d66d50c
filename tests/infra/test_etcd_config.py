"""etcd's rendered config file: each setting that matters at scale, read back from the YAML."""

from __future__ import annotations

import pytest

from infra.etcd.certificates import (
    CA_FILE,
    CLIENT_CAS_FILE,
    PEER_CERT_FILE,
    PEER_KEY_FILE,
    SERVER_CERT_FILE,
    SERVER_KEY_FILE,
)
from infra.etcd.config_file import DATA_DIR, MOUNT_POINT, etcd_config, render_config
from tests.etcd_specs import clusters
from tests.helpers import load_yaml


@pytest.fixture
def rendered():
    _, main, _ = clusters()
    member = main.members[2]
    return main, member, load_yaml(render_config(etcd_config(main, member)))


def test_identity_and_addresses(rendered):
    main, member, conf = rendered
    assert conf["name"] == "prod-etcd-2"
    assert conf["listen-client-urls"] == conf["advertise-client-urls"] == "https://10.0.0.6:2379"
    assert conf["listen-peer-urls"] == conf["initial-advertise-peer-urls"] == "https://10.0.0.6:2380"
    assert conf["initial-cluster"] == main.initial_cluster
    assert conf["initial-cluster-token"] == "prod-etcd"
    assert conf["initial-cluster-state"] == "new"


def test_data_and_wal_live_on_the_local_ssd(rendered):
    _, _, conf = rendered
    assert conf["data-dir"] == DATA_DIR and DATA_DIR.startswith(MOUNT_POINT + "/")
    assert "wal-dir" not in conf  # the WAL stays in the data dir, on the same local device


def test_quota_comes_from_config():
    _, small, _ = clusters(quotaBackendBytes=4 * 1024**3)
    _, large, _ = clusters(quotaBackendBytes=16 * 1024**3)
    assert etcd_config(small, small.members[0])["quota-backend-bytes"] == 4 * 1024**3
    assert etcd_config(large, large.members[0])["quota-backend-bytes"] == 16 * 1024**3


def test_prod_quota_is_at_least_8_gib(rendered):
    assert rendered[2]["quota-backend-bytes"] >= 8 * 1024**3


def test_azure_timeouts_from_openshift(rendered):
    _, _, conf = rendered
    assert (conf["heartbeat-interval"], conf["election-timeout"]) == (500, 2500)


def test_compaction_is_owned_by_etcd(rendered):
    _, _, conf = rendered
    assert conf["auto-compaction-mode"] == "periodic"
    assert conf["auto-compaction-retention"] == "5m"


def test_snapshot_count(rendered):
    assert rendered[2]["snapshot-count"] == 10_000


def test_corruption_checks(rendered):
    _, _, conf = rendered
    assert conf["experimental-initial-corrupt-check"] is True
    assert conf["experimental-compact-hash-check-enabled"] is True
    # Go durations in etcd's config file are integers of nanoseconds: "2h" would be refused.
    assert conf["experimental-corrupt-check-time"] == 2 * 3600 * 10**9
    assert conf["experimental-watch-progress-notify-interval"] == 5 * 10**9


def test_metrics_endpoint_for_prometheus(rendered):
    _, member, conf = rendered
    assert conf["listen-metrics-urls"] == f"http://{member.ip}:2381"
    assert conf["metrics"] == "extensive"


def test_tls_everywhere_with_client_certificates(rendered):
    _, _, conf = rendered
    client, peer = conf["client-transport-security"], conf["peer-transport-security"]
    assert client == {
        "cert-file": SERVER_CERT_FILE,
        "key-file": SERVER_KEY_FILE,
        "trusted-ca-file": CLIENT_CAS_FILE,  # its own CA and the apiserver's client CA
        "client-cert-auth": True,
        "auto-tls": False,
    }
    assert peer == {
        "cert-file": PEER_CERT_FILE,
        "key-file": PEER_KEY_FILE,
        "trusted-ca-file": CA_FILE,  # its own CA only
        "client-cert-auth": True,
        "auto-tls": False,
    }
    assert all(
        url.startswith("https://") for key in ("listen-client-urls", "listen-peer-urls") for url in conf[key].split(",")
    )
    assert conf["tls-min-version"] == "TLS1.3"


def test_membership_changes_never_lose_quorum(rendered):
    assert rendered[2]["strict-reconfig-check"] is True


def test_logs_go_to_the_journal_through_stderr(rendered):
    _, _, conf = rendered
    assert conf["logger"] == "zap" and conf["log-outputs"] == ["stderr"]
