"""Every diagram the plan writes is one Mermaid's own parser accepts: the dev and prod summaries, and the diff
``python -m plan --diff`` writes for the pull-request comment. The parser is the npm package GitHub's renderer
runs (mermaid, pinned in scripts/node-tools/package-lock.json, installed into .tools/ by scripts/setup.sh),
driven by scripts/mermaid-parse.mjs. One node process parses them all: about 5 s, so ``slow``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from infra.network.addressing import plan_addresses
from plan.__main__ import EXIT_CHANGED, main
from plan.artifacts import plan_files, write_plan
from plan.stackfile import PROJECT_DIR
from plan.summary import render_summary
from plan.topology import diagram, markdown
from tests.helpers import require_node_package
from tests.plan.test_topology import config_of

PARSER = PROJECT_DIR / "scripts" / "mermaid-parse.mjs"
pytestmark = pytest.mark.slow


def parse(*files: Path) -> tuple[int, list[dict]]:
    node = require_node_package("mermaid")
    result = subprocess.run([node, str(PARSER), *map(str, files)], capture_output=True, text=True, timeout=120)
    assert result.stdout, result.stderr
    return result.returncode, json.loads(result.stdout)


def test_every_diagram_of_the_dev_and_prod_plans_and_of_a_diff_parses(tmp_path, dev_plan, prod_plan):
    files = []
    for run in (dev_plan, prod_plan):
        config = config_of(run)
        summary = tmp_path / f"{run.stack}-summary.md"
        summary.write_text(render_summary(run.stack, config, plan_addresses(config), run.registrations))
        files.append(summary)
    # The plan before a change that moves dev's NAT host to another zone (a replacement), as written to disk;
    # then `python -m plan --diff` itself, which writes the PR comment's Markdown.
    old = tmp_path / "old"
    write_plan(old, plan_files(dev_plan.registrations, dev_plan.outputs, ""))
    resources = json.loads((old / "resources.json").read_text())
    [nat_host] = [r for r in resources if r["type"].endswith(":VirtualMachine") and "nat" in r["inputs"]["vmName"]]
    nat_host["inputs"]["zones"] = ["9"]
    (old / "resources.json").write_text(json.dumps(resources))
    assert main(["--stack", "dev", "--out", str(tmp_path / "new"), "--diff", str(old)]) == EXIT_CHANGED
    files.append(tmp_path / "new" / "diff.md")
    assert "class m_" in files[-1].read_text()  # the replaced machine is marked

    code, results = parse(*files)
    assert [r["error"] for r in results] == [None, None, None] and code == 0
    assert {r["type"] for r in results} == {"flowchart-v2"}


def test_the_parser_fails_a_broken_diagram(tmp_path, dev_plan):
    config = config_of(dev_plan)
    source = diagram((r.as_json() for r in dev_plan.registrations), plan_addresses(config))
    # What a generator bug would emit: a subgraph left open, a label's quote left unescaped.
    unclosed = source.replace("\n    end\n", "\n", 1)
    unescaped = source.replace("private endpoints", 'private "endpoints"', 1)
    broken = tmp_path / "broken.md"
    broken.write_text("\n\n".join(markdown(text) for text in (source, unclosed, unescaped)) + "\n")
    code, results = parse(broken)
    assert code == 1
    assert results[0]["error"] is None
    assert "Parse error on line" in results[1]["error"] and "Parse error on line" in results[2]["error"]
