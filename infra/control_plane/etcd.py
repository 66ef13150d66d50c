"""How kube-apiserver reaches its two etcd clusters: everything on the main one, Events on their own.

The 2,500-node post moved Events to a separate etcd so that spikes in Event creation cannot slow
the main store; ``--etcd-servers-overrides`` routes the ``events`` resource of the core group
(``/events``) there. Flag format from kubernetes/apiserver pkg/server/options/etcd.go:
``group/resource#servers``, servers separated by ``;``.
"""

from __future__ import annotations

from collections.abc import Sequence

from infra.addressing import AddressPlan
from infra.config import ClusterConfig

CLIENT_PORT = 2379  # etcd's IANA-assigned client port


def planned_client_urls(config: ClusterConfig, addresses: AddressPlan) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(main, events)`` client URLs of the planned members, the same addresses the etcd VMs take."""
    main = tuple(f"https://{ip}:{CLIENT_PORT}" for ip in addresses.etcd_ips("etcd", config.etcd.members))
    events = tuple(f"https://{ip}:{CLIENT_PORT}"
                   for ip in addresses.etcd_ips("events-etcd", config.events_etcd.members))
    return main, events


def etcd_flags(main_urls: Sequence[str], events_urls: Sequence[str]) -> dict[str, str]:
    """``--etcd-servers`` for everything and the ``/events`` override listing exactly the events members."""
    if not main_urls or not events_urls:
        raise ValueError("kube-apiserver needs at least one main and one events etcd client URL")
    for url in (*main_urls, *events_urls):
        if not url.startswith("https://") or any(sep in url for sep in ",;#"):
            raise ValueError(f"etcd client URL {url!r} must be https:// and contain no ',', ';' or '#'")
    return {
        "etcd-servers": ",".join(main_urls),
        "etcd-servers-overrides": "/events#" + ";".join(events_urls),
    }
