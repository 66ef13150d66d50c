"""Bad input always gets a clear answer: any config either plans or stops with the one line naming a key.

Hundreds of generated configs go through ``assemble`` (the whole validation pass, pure and
fast); a fixed, derandomised handful go end to end through ``python -m plan``, which must exit
0 with a plan or 2 with one line and no plan directory, never a traceback.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import io
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from infra.assembly.desired_cluster import assemble
from infra.boot.cloudinit import MAX_CUSTOM_DATA_BASE64_CHARS
from infra.cluster.cluster_spec import ClusterSpec
from infra.config.errors import ConfigError
from infra.facts import roles
from infra.node.pool import custom_data_size
from plan.__main__ import EXIT_BAD_INPUT, EXIT_OK, main
from tests.helpers import raw_config, raw_stack

# The second stage of scripts/test.sh (tens of seconds): generated configs, and the plan CLI run as a process.
pytestmark = pytest.mark.slow

STACKS = {"dev": raw_config("dev"), "prod": raw_config("prod")}
SIZES = [
    "Standard_L8s_v3",
    "Standard_D4ds_v5",
    "Standard_D64ds_v5",
    "Standard_E16ds_v5",
    "Standard_D4s_v5",
    "Standard_ND96isr_H100_v5",
    "Standard_ND96asr_v4",
    "Standard_NC24ads_A100_v4",
    "Standard_X1_v9",
]

# --------------------------------------------------------------------------- values, valid and broken

weird = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(
        [
            0,
            -1,
            1,
            2**31,
            2**63,
            10**30,
            "",
            " ",
            "true",
            "3",
            "ñame",
            "日本語",
            "a\nb",
            "x" * 300,
            "10.0.0.0/8",
            "0.0.0.0/0",
            "10.64.0.1/10",
            "::1/128",
            "10.0.0.0/33",
            "Standard_D4ds_v5",
        ]
    ),
    st.text(max_size=20),
)
nested = st.recursive(
    weird,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=6,
)


def counts(low: int, high: int):
    """In range, at the edges, and just past them."""
    return st.one_of(st.integers(low, high), st.sampled_from([low - 1, low, high, high + 1, 0, -5, 10**9]))


cidrs = st.builds(
    lambda a, b, bits: f"{a}.{b}.0.0/{bits}",
    st.sampled_from([10, 172, 192, 100, 8]),
    st.integers(0, 255),
    st.integers(4, 30),
)
label_keys = st.one_of(
    st.from_regex(r"[a-z]{1,8}(\.[a-z]{1,5})?/[a-z0-9]{1,12}", fullmatch=True),
    st.sampled_from(["kubernetes.io/x", "node.kubernetes.io/x", "a" * 70]),
    st.text(max_size=12),
)
label_values = st.one_of(st.from_regex(r"[a-z0-9]{0,20}", fullmatch=True), st.text(max_size=12))
images = st.one_of(
    st.builds(
        lambda registry, name, tag: f"{registry}/{name}:{tag}",
        st.sampled_from(["registry.k8s.io", "docker.io", "nvcr.io", "ghcr.io", "example.com"]),
        st.from_regex(r"[a-z]{1,12}(/[a-z0-9]{1,40}){0,3}", fullmatch=True),
        st.from_regex(r"[a-z0-9.]{1,60}", fullmatch=True),
    ),
    st.text(max_size=20),
)
pools = st.fixed_dictionaries(
    {
        "name": st.one_of(st.from_regex(r"[a-z][a-z0-9]{0,11}", fullmatch=True), st.text(max_size=14)),
        "role": st.sampled_from(["gpu", "cpu", "tpu"]),
        "vmSize": st.sampled_from(SIZES),
        "minNodes": counts(0, 100),
        "maxNodes": counts(1, 50_000),
        "podIpsPerNode": counts(1, 255),
        "infiniband": st.booleans(),
        "addressSlot": counts(1, 63),
    },
    optional={
        "labels": st.dictionaries(label_keys, label_values, max_size=50),
        "taints": st.lists(
            st.fixed_dictionaries(
                {"key": label_keys, "value": label_values, "effect": st.sampled_from(["NoSchedule", "Bad"])}
            ),
            max_size=5,
        ),
        "retired": st.booleans(),
    },
)

# Plausible values for each place in the config, valid or just outside; anything else gets ``nested``.
TARGETED = {
    ("clusterName",): st.one_of(st.from_regex(r"[a-z][a-z0-9-]{1,18}[a-z0-9]", fullmatch=True), st.text(max_size=25)),
    ("kubernetesVersion",): st.one_of(st.from_regex(r"1\.3[0-5]\.\d{1,2}", fullmatch=True), st.text(max_size=8)),
    ("network", "addressSpace"): cidrs,
    ("network", "serviceCidr"): cidrs,
    ("network", "hub"): st.one_of(
        st.fixed_dictionaries({"addressSpace": cidrs}),
        st.fixed_dictionaries({"stack": st.text(max_size=30)}),
        st.fixed_dictionaries({"stack": st.just("a/b/c"), "addressSpace": cidrs}),
    ),
    ("network", "natHosts", "count"): counts(1, 16),
    ("network", "natHosts", "vmSize"): st.sampled_from(SIZES),
    ("network", "maxPrivateIpsPerVnet"): counts(256, 10**6),
    ("network", "maxPrivateIpsPerPeeredGroup"): counts(256, 10**6),
    ("etcd", "members"): counts(1, 7),
    ("etcd", "vmSize"): st.sampled_from(SIZES),
    ("etcd", "quotaBackendBytes"): counts(2 * 1024**3, 20 * 1024**3),
    ("eventsEtcd", "members"): counts(1, 7),
    ("controlPlane", "apiservers"): counts(1, 15),
    ("controlPlane", "vmSize"): st.sampled_from(SIZES),
    ("nodePools",): st.lists(pools, max_size=6),
    ("images", "preload"): st.lists(images, max_size=200),
    ("addons",): st.dictionaries(
        st.sampled_from(
            ["coredns", "nodeLocalDns", "clusterAutoscaler", "balloons", "gpuHealthCheck", "monitoring", "unknownAddon"]
        ),
        st.dictionaries(
            st.sampled_from(
                [
                    "enabled",
                    "maxReplicas",
                    "localIp",
                    "maxTotalUnreadyPercentage",
                    "maxNodeProvisionTime",
                    "headroomNodes",
                    "intervalSeconds",
                    "retention",
                    "storageGiB",
                ]
            ),
            st.one_of(
                st.booleans(),
                st.integers(-5, 10**6),
                st.sampled_from(["10m", "99h", "15d", "x"]),
                st.dictionaries(st.sampled_from(["gpu", "cpu", "h100a", "x"]), st.integers(-1, 5000), max_size=2),
            ),
            max_size=3,
        ),
        max_size=3,
    ),
}


def _paths(value, prefix=()):
    if isinstance(value, dict):
        for key, item in value.items():
            yield prefix + (key,)
            yield from _paths(item, prefix + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield prefix + (i,)
            yield from _paths(item, prefix + (i,))


@st.composite
def configs(draw):
    """A stack's config with one or two changes: a targeted value, a random value anywhere, a deleted key
    (a missing section), an unknown key, or a type swapped for another."""
    raw = copy.deepcopy(STACKS[draw(st.sampled_from(sorted(STACKS)), label="stack")])
    for _ in range(draw(st.integers(1, 2))):
        how = draw(st.sampled_from(["targeted"] * 4 + ["anywhere", "delete", "unknown key"]))
        if how == "targeted":
            path = draw(st.sampled_from(sorted(TARGETED)))
            parent = raw
            for key in path[:-1]:
                child = parent.setdefault(key, {})
                parent = child if isinstance(child, dict) else {}  # an earlier change made it something else
            parent[path[-1]] = draw(TARGETED[path])
            continue
        path = draw(st.sampled_from(list(_paths(raw))))
        parent = raw
        for key in path[:-1]:
            parent = parent[key]
        if how == "anywhere":
            parent[path[-1]] = draw(nested)
        elif how == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=10))] = draw(nested)
        else:
            parent.append(draw(nested))
    return raw


def plans_or_names_a_key(raw, location="eastus") -> ClusterSpec | None:
    try:
        spec = assemble(raw, location).spec
    except ConfigError as error:
        message = str(error)
        assert "\n" not in message and message.startswith("invalid config "), message
        assert error.key.strip(" .:"), f"no key named: {message}"
        event(f"refused: {error.key.split('.')[0].split('[')[0]}")
        return None
    event("planned")
    return spec


@settings(max_examples=250, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(configs(), st.sampled_from(["eastus"] * 9 + [None, 3, "East US"]))
def test_any_config_is_a_spec_or_one_line_naming_a_key(raw, location):
    plans_or_names_a_key(raw, location)


# --------------------------------------------------------------------------- end to end


def _overrides():
    """``--config KEY=VALUE`` the way a user would type them; the value is YAML, as ``pulumi config set``."""

    def override(path_and_value):
        path, value = path_and_value
        text = yaml.safe_dump(value, default_flow_style=True, width=10**6)
        return f"{path}={text.strip().removesuffix('...').strip()}"

    paths = st.sampled_from(
        [
            "etcd.members",
            "controlPlane.apiservers",
            "network.natHosts.count",
            "nodePools[1].maxNodes",
            "nodePools[1].podIpsPerNode",
            "nodePools[0].name",
            "nodePools[1].labels",
            "network.serviceCidr",
            "network.hub.addressSpace",
            "kubernetesVersion",
            "clusterName",
            "images.preload",
            "addons.coredns.maxReplicas",
            "eventsEtcd.quotaBackendBytes",
            "nodePools[1].retired",
        ]
    )
    values = st.one_of(
        counts(1, 7), cidrs, weird, st.lists(images, max_size=3), st.dictionaries(label_keys, label_values, max_size=2)
    )
    return st.lists(st.tuples(paths, values).map(override), min_size=1, max_size=2)


@settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(_overrides())
def test_the_plan_cli_exits_0_with_a_plan_or_2_with_one_line_and_nothing_written(overrides):
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory) / "plan"
        stderr, stdout = io.StringIO(), io.StringIO()
        args = ["--stack", "dev", "--out", str(out)] + [arg for o in overrides for arg in ("--config", o)]
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(stdout):
            code = main(args)
        assert code in (EXIT_OK, EXIT_BAD_INPUT), (code, stderr.getvalue())
        event(f"exit {code}")
        if code == EXIT_OK:
            assert (out / "resources.json").is_file() and (out / "outputs.json").is_file()
        else:
            assert stderr.getvalue().count("\n") == 1 and stderr.getvalue().startswith("error: invalid config ")
            assert not out.exists()
        assert [p.name for p in Path(directory).iterdir()] in ([], ["plan"]), "no staging directory left behind"


# --------------------------------------------------------------------------- what the generator found


def test_a_key_with_a_newline_is_printed_escaped_on_one_line():
    raw = raw_config("dev")
    raw["network"]["hub"]["odd\nkey"] = {}
    with pytest.raises(ConfigError) as caught:
        assemble(raw, "eastus")
    assert str(caught.value).startswith(
        'invalid config supercluster:network.hub."odd\\nkey" = {}: expected a known key'
    )
    raw = raw_config("dev")
    raw[""] = None
    with pytest.raises(ConfigError, match=r'^invalid config supercluster:"" = None: expected a known key'):
        assemble(raw, "eastus")


def test_a_preload_list_over_azures_custom_data_limit_stops_validation_naming_it():
    raw = raw_config("dev")
    raw["images"] = {"preload": [f"docker.io/library/image-{i}:v1.0.{i}" for i in range(400)]}
    with pytest.raises(ConfigError) as caught:
        assemble(raw, "eastus")
    assert caught.value.key == "images.preload"
    assert f"over Azure's customData limit of {MAX_CUSTOM_DATA_BASE64_CHARS:,}" in str(caught.value)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_validation_checks_the_exact_cloud_init_the_machines_receive(stack, dev_plan, prod_plan):
    """``assemble`` renders each shard's and the NAT hosts' cloud-init once; the components send exactly that
    text, so the size validation checked is the size Azure sees."""
    run = {"dev": dev_plan, "prod": prod_plan}[stack]
    cluster = assemble(raw_stack(stack), "eastus")  # the stack the plans were made from
    name = cluster.spec.config.cluster_name
    rendered = {shard.shard.name: shard.cloud_init for shard in cluster.shards}
    for vmss in run.node_scale_sets():
        shard = vmss.name.removeprefix(f"{name}-pool-")
        sent = base64.b64decode(vmss.inputs["virtualMachineProfile"]["osProfile"]["customData"]).decode()
        assert sent == rendered[shard], vmss.name
    nat = [vm for vm in run.of_type("azure-native:compute:VirtualMachine") if "nat-hosts" in vm.name]
    [nat_cloud_init] = {m.cloud_init for m in cluster.machines_of(roles.NAT_HOST)}
    assert nat and all(base64.b64decode(vm.inputs["osProfile"]["customData"]).decode() == nat_cloud_init for vm in nat)


@pytest.mark.parametrize("text", ["", "a", "ab", "abc", "abcd", "é" * 7])
def test_custom_data_size_is_the_base64_length_azure_counts(text):
    assert custom_data_size(text) == len(base64.b64encode(text.encode()))
