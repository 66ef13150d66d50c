"""Stack files are read as the Pulumi CLI reads them (YAML 1.2, no duplicate keys, JSON values), and
``--config`` follows ``pulumi config set --path``; everything else is one line naming file, line, column."""

from __future__ import annotations

import pytest
import yaml

from infra.config.errors import ConfigError
from plan.stack_yaml import load_file, load_text
from plan.stackfile import apply_override, load_stack_config, parse_path, path_value

# Plain scalars and what YAML 1.2's core schema (and Pulumi's gopkg.in/yaml.v3, decoding into an
# interface{} and on through JSON) make of them. PyYAML's YAML 1.1 reading differs on most of these.
AGREED = {
    "1:30": "1:30",  # YAML 1.1: sexagesimal 90
    "yes": "yes",
    "no": "no",
    "on": "on",
    "off": "off",
    "Y": "Y",  # YAML 1.1: booleans
    "0o17": 15,
    "0x1F": 31,
    "+1": 1,
    "-7": -7,
    "0": 0,
    ".5": 0.5,
    "1e3": 1000,
    "5.0": 5,
    "1.5e3": 1500,
    "-2.5": -2.5,  # whole floats become JSON integers
    "~": None,
    "null": None,
    "NULL": None,
    "": None,
    "true": True,
    "False": False,
    "TRUE": True,
    "1.33.4": "1.33.4",
    "10.0.0.0/8": "10.0.0.0/8",
    "Standard_D4ds_v5": "Standard_D4ds_v5",
}
# Plain scalars YAML 1.2 and Pulumi's reader disagree on, or that JSON cannot carry: refused.
REFUSED = {
    "017": "leading zero",
    "08": "leading zero",
    "1_000": "without '_'",
    "0b101": "0b binary",
    ".inf": "finite",
    "-.Inf": "finite",
    ".nan": "finite",
    "1e999": "finite",
    "2024-01-01": "a date is text",
    "2001-12-14t21:59:43.10-05:00": "a date is text",
}


@pytest.mark.parametrize("text,expected", sorted(AGREED.items()))
def test_plain_scalars_resolve_by_yaml_1_2_core(text, expected):
    value = load_text(f"k: {text}\n", "t.yaml")["k"]
    assert value == expected and type(value) is type(expected), (text, value)


@pytest.mark.parametrize("text", ["'017'", '"1_000"', "'yes'", "'.inf'", '"1:30"'])
def test_quoted_scalars_are_strings(text):
    assert load_text(f"k: {text}\n", "t.yaml")["k"] == text[1:-1]


@pytest.mark.parametrize("text,why", sorted(REFUSED.items()))
def test_ambiguous_or_non_json_scalars_are_refused_with_position(text, why):
    with pytest.raises(ConfigError) as caught:
        load_text(f"a: 1\nk: {text}\n", "Pulumi.dev.yaml")
    message = str(caught.value)
    assert message.startswith("invalid config Pulumi.dev.yaml:2:4 = ") and why in message, message
    assert "\n" not in message


@pytest.mark.parametrize(
    "document,position,why",
    [
        ("config:\n  a: 1\n  a: 2\n", "3:3", "duplicate key 'a', first at line 2"),
        ("etcd:\n  members: 3\n  members: 1\n", "3:3", "duplicate key 'members'"),
        ("k: !!binary aGVsbG8=\n", "1:4", "!!binary"),
        ("k: !!set {a, b}\n", "1:4", "!!set"),
        ("k: !!timestamp 2024-01-01\n", "1:4", "!!timestamp"),
        ("k: !custom x\n", "1:4", "!custom"),
        ("a: &x 1\nb: *x\n", "1:4", "no anchor"),
        ("a: [1, 2\n", "2:1", "valid YAML"),
        ("a:\n\tb: 1\n", "2:1", "valid YAML"),
        ("1: a\n", "1:1", "a string key"),
        ("? [a]\n: b\n", "1:3", "a string key"),
        ("a: b\n  c: d\n", "2:4", "valid YAML"),
        ("k: \x07\n", "1:4", "printable characters"),
    ],
)
def test_yaml_problems_are_one_line_with_file_line_and_column(document, position, why):
    with pytest.raises(ConfigError) as caught:
        load_text(document, "Pulumi.dev.yaml")
    message = str(caught.value)
    assert message.startswith(f"invalid config Pulumi.dev.yaml:{position} "), message
    assert why in message and "\n" not in message, message


def test_a_utf16_file_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text("config:\n  supercluster:clusterName: dev\n", encoding="utf-16")
    with pytest.raises(ConfigError, match=r"^invalid config Pulumi.dev.yaml:1:1 = .*expected a UTF-8 file"):
        load_file(path)


def test_a_utf8_bom_is_accepted(tmp_path):
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_bytes(b"\xef\xbb\xbfconfig:\n  a: 1\n")
    assert load_file(path) == {"config": {"a": 1}}


def _project(tmp_path, stack_text: str):
    (tmp_path / "Pulumi.yaml").write_text("name: supercluster\nconfig:\n  addons:\n    default: {}\n")
    (tmp_path / "Pulumi.x.yaml").write_text(stack_text)
    return tmp_path


@pytest.mark.parametrize(
    "stack_text,expected",
    [
        ("- a\n- b\n", "a mapping with a config: section"),
        ("config:\n  clusterName: dev\n", "a key of the form <namespace>:<name>"),
        ("config:\n  superclustr:clusterName: dev\n", "superclustr:clusterName = 'dev': expected a known key"),
        ("config:\n  supercluster:etcd: {members: 3}\n  supercluster:etcd: {members: 1}\n", "duplicate key"),
    ],
)
def test_stack_file_shape_is_checked(tmp_path, stack_text, expected):
    with pytest.raises(ConfigError) as caught:
        load_stack_config("x", [], project_dir=_project(tmp_path, stack_text))
    assert expected in str(caught.value)


# ------------------------------------------------------------------ --config, as pulumi config set --path


@pytest.mark.parametrize(
    "text,expected",
    [
        ("true", True),
        ("false", False),
        ("3", 3),
        ("-3", -3),
        ("+3", 3),
        ("0", 0),
        ("0123", "0123"),
        ("1.5", "1.5"),
        ("1e3", "1e3"),
        ("yes", "yes"),
        ("[a, b]", "[a, b]"),
        ("", ""),
        ("1_000", "1_000"),
        ("True", "True"),
        (str(2**63), 2**63),
        (str(2**64 - 1), 2**64 - 1),
        (str(2**64), str(2**64)),
        ("-01", -1),
        ("+5", 5),
        (str(-(2**63)), -(2**63)),
        (str(-(2**63) - 1), str(-(2**63) - 1)),
    ],
)
def test_path_values_are_typed_as_pulumi_types_them(text, expected):
    value = path_value(text)
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize(
    "path,segments",
    [
        ("a", ["a"]),
        ("a.b", ["a", "b"]),
        ("a[0].b", ["a", 0, "b"]),
        ('a["x.y/z"].b', ["a", "x.y/z", "b"]),
        ("a[1][2]", ["a", 1, 2]),
        ('a.b["c"]', ["a", "b", "c"]),
        # Pulumi's parser is loose in places, and so is this one: the same paths mean the same.
        ("a..b", ["a", "b"]),
        ("a[0]b", ["a", 0, "b"]),
        ("a[*]", ["a", "*"]),
        ("a[-1]", ["a", -1]),
        ('a["say \\"hi\\""]', ["a", 'say "hi"']),
        ("a]b", ["a]b"]),
    ],
)
def test_paths_parse_like_pulumi_property_paths(path, segments):
    assert parse_path(path, path) == segments


@pytest.mark.parametrize("path", ["", ".a", "a.", "a.[0]", "[0]", "a[x]", 'a["b', 'a["b"', "a[", "a[1.5]", '[""]'])
def test_bad_paths_are_one_line(path):
    with pytest.raises(ConfigError, match=r"^invalid config --config = "):
        parse_path(path, path)


def test_an_index_equal_to_the_length_appends_and_a_larger_one_is_refused():
    values = {"supercluster:nodePools": [{"name": "a"}, {"name": "b"}]}
    apply_override(values, "nodePools[2].name=c")
    apply_override(values, "nodePools[2].maxNodes=4")
    assert values["supercluster:nodePools"][2] == {"name": "c", "maxNodes": 4}
    with pytest.raises(ConfigError, match=r"expected an index from 0 to 3 in nodePools \(it has 3 items; 3 appends\)"):
        apply_override(values, "nodePools[4].name=e")
    with pytest.raises(ConfigError, match=r"expected an index from 0 to 3 in nodePools"):
        apply_override(values, "nodePools[-1].name=e")


def test_a_new_list_is_as_long_as_its_index_and_a_top_level_scalar_gives_way():
    values: dict = {"supercluster:images": "not an object"}
    apply_override(values, "images.preload[2]=a")
    apply_override(values, "network.hub.stack=o/p/s")
    assert values == {
        "supercluster:images": {"preload": [None, None, "a"]},
        "supercluster:network": {"hub": {"stack": "o/p/s"}},
    }


def test_missing_containers_are_created_and_top_level_values_stay_strings():
    values: dict = {}
    apply_override(values, "images.preload[0]=registry.k8s.io/pause:3.10")
    apply_override(values, 'nodePools[0].labels["team.io/x"]=0123')
    apply_override(values, "clusterName=123")
    apply_override(values, "azure-native:location=westus2")
    assert values == {
        "supercluster:images": {"preload": ["registry.k8s.io/pause:3.10"]},
        "supercluster:nodePools": [{"labels": {"team.io/x": "0123"}}],
        "supercluster:clusterName": "123",
        "azure-native:location": "westus2",
    }


def test_a_path_through_a_value_of_another_kind_is_refused():
    values = {"supercluster:network": {"hub": "x"}}
    with pytest.raises(ConfigError, match=r"network.hub is not an object"):
        apply_override(values, "network.hub.stack=a/b/c")
    with pytest.raises(ConfigError, match=r"network is an object"):
        apply_override(values, "network[0]=x")


def test_the_program_itself_refuses_a_misspelt_namespace():
    """What `pulumi up` runs (components/stack_config.py), not only the offline plan's reader."""
    from plan.runner import run_program

    values = load_stack_config("dev")
    values["superclustr:addons"] = {"balloons": {"enabled": False}}
    with pytest.raises(ConfigError, match=r"^invalid config superclustr:addons = .*expected a known key"):
        run_program("dev", values)


def test_a_text_read_again_is_not_composed_again_and_each_caller_owns_its_value(monkeypatch):
    composed = []
    compose = yaml.compose
    monkeypatch.setattr(yaml, "compose", lambda *a, **k: composed.append(1) or compose(*a, **k))
    text = "config:\n  supercluster:pools:\n    - name: cpu-a\n      maxNodes: 3\n"
    first = load_text(text, "Pulumi.cache-test.yaml")
    first["config"]["supercluster:pools"][0]["maxNodes"] = 99
    second = load_text(text, "Pulumi.cache-test.yaml")
    assert len(composed) == 1
    assert second["config"]["supercluster:pools"][0]["maxNodes"] == 3
