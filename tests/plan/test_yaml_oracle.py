"""The stack-file reader agrees with the Pulumi CLI's own YAML reader on a corpus of tricky inputs.

The oracle is gopkg.in/yaml.v3 at the version the pinned Pulumi SDK requires, built from its Go
module (tests/yaml_oracle) and run as Pulumi runs it: decode into ``any``, then JSON. For every
input, plan/stack_yaml.py either gives exactly the oracle's JSON or refuses with one line;
the refusals are exactly the listed divergences, each where YAML 1.2 and Pulumi's reader disagree
(so no reading is safe) or where Pulumi itself fails.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from infra.config.errors import ConfigError
from plan.stack_yaml import load_text
from plan.stackfile import PROJECT_DIR
from tests.helpers import require_tool

ORACLE_DIR = PROJECT_DIR / "tests" / "yaml_oracle"

SCALARS = [
    "1:30",
    "yes",
    "no",
    "on",
    "off",
    "y",
    "N",
    "True",
    "TRUE",
    "false",
    "~",
    "null",
    "Null",
    "",
    "0o17",
    "0x1F",
    "0xff",
    "+1",
    "-7",
    "0",
    "-0",
    ".5",
    "-.5",
    "1e3",
    "1E3",
    "5.0",
    "1.5e3",
    "+12.5",
    "1.33.4",
    "10.0.0.0/8",
    "Standard_D4ds_v5",
    "169.254.20.10",
    "3.10",
    "1.30",
    "0.0",
    "12:30:00",
    "9223372036854775807",
    "1e20",
    "=",
    "<<",
    "'quoted'",
    '"017"',
    "'2024-01-01'",
    "|-\n  block",
]
# What the reader refuses, and why: YAML 1.2 and Pulumi's reader disagree, or Pulumi cannot make JSON.
REFUSED = {
    "017": 15,
    "08": 8,
    "1_000": 1000,
    "0b101": 5,
    "2024-01-01": "2024-01-01T00:00:00Z",
    "2001-12-14t21:59:43.10-05:00": "2001-12-14T21:59:43.1-05:00",
    ".inf": None,
    "-.Inf": None,
    ".nan": None,
    "1e999": "1e999",
}
DOCUMENTS = {
    "duplicate key": "a: 1\na: 2\n",
    "duplicate nested key": "a:\n  b: 1\n  b: 2\n",
    "tab indentation": "a:\n\tb: 1\n",
    "unclosed flow": "a: [1, 2\n",
}


@pytest.fixture(scope="module")
def oracle() -> Path:
    go = require_tool("go")
    sources = sorted(p for p in ORACLE_DIR.iterdir() if p.suffix in (".go", ".mod", ".sum"))
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:16]
    cache = Path(os.environ.get("SUPERCLUSTER_CACHE", Path.home() / ".cache" / "supercluster")) / "bin"
    binary = cache / f"yaml-oracle-{digest}"
    if not binary.exists():
        cache.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly"}
        subprocess.run(
            [go, "build", "-trimpath", "-o", str(binary), "."], cwd=ORACLE_DIR, env=env, check=True, timeout=600
        )
    return binary


def pulumi_reads(oracle: Path, document: str) -> tuple[bool, object]:
    result = subprocess.run([str(oracle)], input=document, capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        return False, result.stdout.strip()
    return True, json.loads(result.stdout)


@pytest.mark.parametrize("scalar", SCALARS)
def test_accepted_scalars_read_exactly_as_pulumi_reads_them(oracle, scalar):
    document = f"k: {scalar}\n"
    ok, pulumi = pulumi_reads(oracle, document)
    assert ok, pulumi
    ours = load_text(document, "t.yaml")
    assert json.loads(json.dumps(ours)) == pulumi, (scalar, ours, pulumi)
    assert type(ours["k"]) is type(pulumi["k"]), (scalar, ours, pulumi)


@pytest.mark.parametrize("scalar,pulumi_value", sorted(REFUSED.items()))
def test_refused_scalars_are_exactly_where_pulumi_differs_or_fails(oracle, scalar, pulumi_value):
    document = f"k: {scalar}\n"
    ok, pulumi = pulumi_reads(oracle, document)
    if pulumi_value is None:
        assert not ok, pulumi  # Pulumi itself cannot make JSON of it
    else:
        assert ok and pulumi["k"] == pulumi_value, pulumi
    with pytest.raises(ConfigError):
        load_text(document, "t.yaml")


@pytest.mark.parametrize("name", DOCUMENTS)
def test_documents_pulumi_refuses_are_refused(oracle, name):
    ok, pulumi = pulumi_reads(oracle, DOCUMENTS[name])
    assert not ok, pulumi
    with pytest.raises(ConfigError):
        load_text(DOCUMENTS[name], "t.yaml")


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_stack_files_read_exactly_as_pulumi_reads_them(oracle, stack):
    text = (PROJECT_DIR / f"Pulumi.{stack}.yaml").read_text()
    ok, pulumi = pulumi_reads(oracle, text)
    assert ok and load_text(text, "x") == pulumi
