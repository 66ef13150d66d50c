"""Guards for the two cloud-init shortcuts a large plan relies on (docs/performance.md): ``render`` joins
cached per-file entries instead of dumping the whole document, and an InfiniBand pool's shards are
relabelled from its first instead of built one by one. Each is compared with what it replaces."""

from __future__ import annotations

import dataclasses

import pytest

from infra.boot.cloudinit import CloudConfig, document, dump, render
from infra.cluster.cluster_spec import build_cluster_spec
from infra.config.sizing import shards
from infra.network import traffic_counters
from infra.node import kubelet, node_cloud_config, node_cloud_configs
from tests.helpers import pool_node_spec, raw_config


def every_section() -> CloudConfig:
    cloud = CloudConfig(packages=["mdadm"])
    cloud.apt_sources = {"nvidia": {"source": "deb https://example.invalid stable main"}}
    cloud.bootcmd += [["mount", "-a"], "echo early"]
    cloud.mounts.append(["ephemeral0"])
    cloud.add("/etc/b.conf", "line1\nline2\n")
    cloud.add("/etc/a.conf", "one line: with a colon", permissions="0600")
    cloud.add("/usr/local/bin/tool", "#!/bin/sh\n\n  indented\n# no newline at the end", permissions="0755")
    cloud.add("/etc/empty", "")
    cloud.runcmd.append(["systemctl", "daemon-reload"])
    return cloud


def test_render_is_the_whole_documents_dump_byte_for_byte():
    cloud = every_section()
    assert render(cloud) == dump(document(cloud))
    assert render(cloud) == render(every_section()), "a cached entry renders as it did the first time"
    assert render(CloudConfig()) == dump({}) == "#cloud-config\n{}\n"


@pytest.fixture(scope="module")
def prod():
    return build_cluster_spec(raw_config("prod"), "eastus")


def test_every_prod_pools_nodes_render_as_the_whole_documents_dump(prod):
    steps = traffic_counters.boot_steps(prod.config, prod.addresses)
    for pool in prod.config.node_pools:
        cloud = node_cloud_config(pool_node_spec(prod, pool), steps)
        assert render(cloud) == dump(document(cloud)), pool.name


def test_an_infiniband_pools_shards_are_relabelled_exactly_as_each_would_be_built(prod):
    pool = next(p for p in prod.config.node_pools if p.infiniband)
    specs = [pool_node_spec(prod, pool, index) for index in range(len(shards(pool)))]
    assert len(specs) > 2
    steps = traffic_counters.boot_steps(prod.config, prod.addresses)
    relabelled = [render(cloud) for cloud in node_cloud_configs(specs, steps)]
    assert relabelled == [render(node_cloud_config(spec, steps)) for spec in specs]
    assert len(set(relabelled)) == len(specs), "each shard registers its own InfiniBand domain"


def test_nodes_that_differ_in_more_than_their_labels_are_not_relabelled(prod):
    pool = next(p for p in prod.config.node_pools if p.infiniband)
    first, second = pool_node_spec(prod, pool, 0), pool_node_spec(prod, pool, 1)
    with pytest.raises(ValueError, match="more than their labels"):
        node_cloud_configs([first, dataclasses.replace(second, max_pods=second.max_pods + 1)])


def test_relabelling_copies_and_leaves_the_original_as_it_was():
    cloud = every_section()
    cloud.add(kubelet.UNIT_PATH, kubelet.unit({"a": "1"}, gpu=False))
    before = render(cloud)
    other = kubelet.relabelled(cloud, {"a": "2"}, gpu=False)
    other.runcmd.append("echo only in the copy")
    assert render(cloud) == before
    assert "a=2" in render(other) and "a=2" not in before
    with pytest.raises(ValueError, match="is not written"):
        CloudConfig().with_content(kubelet.UNIT_PATH, "x")


def test_a_section_is_serialised_once_per_value_as_the_whole_documents_dump_writes_it():
    """``render`` serialises each section other than ``write_files`` once per distinct value (the shards of a pool
    run the same commands): the same text as the whole document's dump for plain values of every type, and a value
    that holds the same list twice (written with an anchor, an identity and not a value) serialised as it is."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from infra.boot import cloudinit

    scalars = st.one_of(st.text(max_size=8), st.integers(-2, 2), st.booleans(), st.none())
    values = st.recursive(
        scalars,
        lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=4), inner, max_size=3)),
        max_leaves=12,
    )

    @settings(max_examples=300, deadline=None)
    @given(st.sampled_from(["bootcmd", "runcmd", "mounts", "apt"]), values)
    def agree(key, value):
        expected = dump({key: value}).removeprefix("#cloud-config\n")
        assert cloudinit._section(key, value) == expected
        assert cloudinit._section(key, value) == expected, "the second time, from the cache"

    agree()
    shared = ["echo", "twice"]
    twice = [shared, shared]
    assert "&id001" in cloudinit._section("runcmd", twice), "an anchor, as the whole document's dump writes it"
    assert cloudinit._section("runcmd", twice) == dump({"runcmd": twice}).removeprefix("#cloud-config\n")
    assert cloudinit._section("runcmd", [True]) != cloudinit._section("runcmd", [1]), "True is not 1"
