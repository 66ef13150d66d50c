"""The plan's secret scan finds what must never be written, and passes what may be."""

from __future__ import annotations

import pytest

from plan.secret_scan import scan_text

LEAKS = {
    "pem key": "-----BEGIN RSA PRIVATE KEY-----\nabc\n",
    "pkcs8 key": "x: |\n  -----BEGIN PRIVATE KEY-----\n",
    "bootstrap token": "token=abcdef.0123456789abcdef",
    "kubeconfig key": "    client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQ==",
    "kubeconfig token": "users:\n- name: x\n  user:\n    token: 0123456789abcdef\n",
    "storage key": "DefaultEndpointsProtocol=https;AccountKey=abcdefghijklmnopqrstuvwxyz0123==",
    "sas": "https://x.blob.core.windows.net/c?sv=2022&sig=abcdefghijklmnopqrstuvwxyz%3D",
    "password": '"password": "hunter2hunter2"',
    "yaml password": "admin-password: 'hunter2hunter2'",
}


@pytest.mark.parametrize("text", LEAKS.values(), ids=LEAKS.keys())
def test_leaks_are_found(text):
    assert scan_text("f", text)


@pytest.mark.parametrize(
    "text",
    [
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
        '"value": "[secret]"',
        "password: '[secret]'",
        "fetch node-bootstrap-token /etc/kubernetes/bootstrap-token 0600",
        "10.0.0.0/8 image: registry.k8s.io/pause:3.10",
        '"type": "random:index/randomPassword:RandomPassword"',
    ],
)
def test_public_material_and_secret_names_pass(text):
    assert scan_text("f", text) == []


def test_a_value_handed_out_as_a_secret_is_found_verbatim_wherever_it_is():
    from plan.secret_scan import scan_files

    files = {"a.yaml": "x: 1\nkey: 3q2+7w==\n", "b.yaml": "nothing here\n"}
    assert [(f.path, f.kind, f.line) for f in scan_files(files, {"3q2+7w=="})] == [
        ("a.yaml", "secret value handed out by a provider", 2)
    ]


def test_a_private_key_handed_out_is_found_verbatim_as_well_as_by_its_pattern():
    """Values holding a key's header are looked for only where the key pattern found one: the same findings."""
    from plan.secret_scan import scan_files

    key = "-----BEGIN RSA PRIVATE KEY-----\nMIIEabc\n-----END RSA PRIVATE KEY-----\n"
    files = {"a.pem": "x\n" + key, "b.pem": "-----BEGIN PRIVATE KEY-----\nother\n", "c": "MIIEabc\n"}
    assert [(f.path, f.kind, f.line) for f in scan_files(files, {key, "3q2+7w==", "MIIEabc"})] == [
        ("a.pem", "private key", 2),
        ("a.pem", "secret value handed out by a provider", 2),
        ("a.pem", "secret value handed out by a provider", 3),
        ("b.pem", "private key", 1),
        ("c", "secret value handed out by a provider", 1),
    ]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_real_plans_hold_no_secret_pattern_and_none_of_the_secret_values(stack, dev_plan, prod_plan):
    """Every file of the plan (resources.json, outputs.json, every rendered file), and in particular every
    machine's customData, is free of secrets: the patterns, and each private key, password and random key
    the mocks actually handed out."""
    from plan.artifacts import custom_data_of, plan_files
    from plan.secret_scan import scan_files

    run = {"dev": dev_plan, "prod": prod_plan}[stack]
    kinds = {r.type for r in run.registrations}
    assert {
        "tls:index/privateKey:PrivateKey",
        "random:index/randomPassword:RandomPassword",
        "random:index/randomBytes:RandomBytes",
    } <= kinds
    assert len(run.secret_values) >= 3  # every key, the bootstrap token's secret, the encryption key
    files = plan_files(run.registrations, run.outputs, "")
    assert {"resources.json", "outputs.json"} <= set(files) and any(p.endswith("cloud-init.yaml") for p in files)
    assert scan_files(files, run.secret_values) == []
    custom_data = {r.name: custom_data_of(r) for r in run.registrations if custom_data_of(r) is not None}
    assert len(custom_data) >= 5  # etcd, events etcd, apiserver, NAT host, every scale set
    assert scan_files(custom_data, run.secret_values) == []


# The scan's patterns are written to open with a literal (fast); these are the plain forms they must agree with.
_REFERENCE = {
    "private key": r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
    "bootstrap token": r"\b[a-z0-9]{6}\.[a-z0-9]{16}\b",
    "kubeconfig client key": r"client-key-data:\s*\S{16,}",
    "kubeconfig token": r"(?m)^\s*token:\s*\S{8,}",
    "storage account key": r"AccountKey=[A-Za-z0-9+/=]{20,}",
    "SAS signature": r"[?&]sig=[A-Za-z0-9%+/=]{20,}",
    "password": r"(?i)(?<![a-z])\"?password\"?\s*[:=]\s*\"?(?!\[secret\])[^\s\"]{6,}",
}


def _reference_scan(text: str) -> set[tuple[str, int]]:
    import re

    return {
        (kind, text.count("\n", 0, m.start()) + 1)
        for kind, pattern in _REFERENCE.items()
        for m in re.finditer(pattern, text)
    }


_PIECES = [
    "abcdef",
    ".0123456789abcdef",
    "ABCDEF",
    "x",
    " ",
    "\n",
    "  ",
    ":",
    "=",
    '"',
    "?",
    "&",
    "sig=",
    "token:",
    "password",
    "PassWord",
    "Xpassword",
    "[secret]",
    "client-key-data: ",
    "AccountKey=",
    "-----BEGIN ",
    "RSA ",
    "PRIVATE KEY-----",
    "0123456789abcdefghij",
    "%3D",
    "_",
    "-",
]


@pytest.mark.parametrize(
    "text",
    [
        *LEAKS.values(),
        "a\n  token: 12345678\n",
        "xtoken: 12345678",
        "abcdefg.0123456789abcdef",
        "abcdef.0123456789abcdefg",
        "Password=hunter22",
    ],
)
def test_fast_patterns_find_what_the_plain_ones_find(text):
    assert {(f.kind, f.line) for f in scan_text("f", text)} == _reference_scan(text)


def test_fast_patterns_agree_with_the_plain_ones_on_generated_text():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.sampled_from(_PIECES), max_size=30).map("".join))
    def agree(text):
        assert {(f.kind, f.line) for f in scan_text("f", text)} == _reference_scan(text)

    agree()


def _whole_text_scan(files: dict[str, str], secret_values: set[str]) -> list[tuple[str, str, int]]:
    """What ``scan_files`` found when it scanned every text whole: the reference its pieces must agree with."""
    import re

    from plan.secret_scan import scan_values

    values = sorted(secret_values)
    unkeyed = [value for value in values if not re.search(_REFERENCE["private key"], value)]
    found = []
    for path, text in sorted(files.items()):
        patterns = scan_text("", text)
        keyed = any(finding.kind == "private key" for finding in patterns)
        found += [(path, f.kind, f.line) for f in patterns + scan_values(text, values if keyed else unkeyed)]
    return found


_VALUES = [
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEabc\n-----END RSA PRIVATE KEY-----\n",
    "-----BEGIN RSA PRIVATE KEY-----",
    "3q2+7w==",
    "abcdef",
    "x\n- y",
    "- abc",
    "abc\n",
    "\n-",
]


@pytest.mark.parametrize("items_per_piece", [1, 2, 8])
def test_texts_scanned_in_pieces_find_what_whole_texts_find(items_per_piece, monkeypatch):
    """Texts are scanned in pieces cut before unindented YAML sequence items, each distinct piece once: the same
    findings, in the same order, as each text scanned whole, for texts that share pieces and values that span
    a cut or hold a key."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from plan import secret_scan

    monkeypatch.setattr(secret_scan, "_ITEMS_PER_PIECE", items_per_piece)
    pieces = [
        *_PIECES,
        *("\n- ", "\n- ", "- ", "\n-", "token: 12345678", "MIIEabc", "\n-----END RSA PRIVATE KEY-----\n"),
        # a key whose value is on the next line, and values that open a line
        *("client-key-data:\n", "password:\n", "token:\n", "\n0123456789abcdefghij", "\n 0123456789abcdefghij"),
    ]
    text = st.lists(st.sampled_from(pieces), max_size=40).map("".join)

    @settings(max_examples=200, deadline=None)
    @given(st.lists(text, min_size=1, max_size=4), st.sets(st.sampled_from(_VALUES)))
    def agree(texts, values):
        files = {f"f{i}": t for i, t in enumerate(texts)}
        files["joined"] = "\n- ".join(texts)  # pieces shared with the others
        found = [(f.path, f.kind, f.line) for f in secret_scan.scan_files(files, values)]
        assert found == _whole_text_scan(files, values)

    agree()


def test_pieces_a_caller_holds_find_what_whole_texts_find():
    """Pieces a caller already holds for a text (a rendered cloud-init's write_files items) are taken where they
    join to the text with every cut right after a newline that opens a ``- `` line, any number of items apart;
    otherwise the text is cut as ever. Either way the findings are the whole texts'."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from plan import secret_scan

    pieces = [
        *_PIECES,
        *("\n- ", "- ", "\n-", "token: 12345678", "\n-----END RSA PRIVATE KEY-----\n", "client-key-data:\n"),
        *("password:\n", "token:\n", "\n0123456789abcdefghij"),
    ]

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.sampled_from(pieces), max_size=40).map("".join), st.sets(st.sampled_from(_VALUES)), st.data())
    def agree(text, values, data):
        cuts = [i + 1 for i in range(len(text)) if text.startswith("\n- ", i)]
        chosen = sorted(data.draw(st.sets(st.sampled_from(cuts))) if cuts else ())
        if data.draw(st.booleans()):  # a cut where none may be
            chosen = sorted({*chosen, data.draw(st.integers(0, len(text)))})
        bounds = [0, *chosen, len(text)]
        held = [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
        if data.draw(st.booleans()) and held:
            held[-1] += "x"  # pieces that are not the text's
        found = [(f.path, f.kind, f.line) for f in secret_scan.scan_files({"f": text}, values, {text: held})]
        assert found == _whole_text_scan({"f": text}, values)

    agree()
    text = "a\n- b\n- c"
    assert secret_scan._cut_as_pieces(text, ["a\n", "- b\n", "- c"])
    assert not secret_scan._cut_as_pieces(text, ["a\n-", " b\n- c"]), "not before a '- ' line"
    assert not secret_scan._cut_as_pieces(text, ["a\n", "- b\n"]), "not the whole text"
