"""The node join-time table: the code the plan summary prints from and the table in docs/node-image.md agree."""

from __future__ import annotations

from infra.node import join_time
from plan.critical_path import TYPICAL_CREATE_SECONDS
from plan.stackfile import PROJECT_DIR

DOC = PROJECT_DIR / "docs" / "node-image.md"


def doc_rows() -> list[list[str]]:
    section = DOC.read_text().split("## Node join time", 1)[1].split("###", 1)[0]
    rows = [line.strip().strip("|").split("|") for line in section.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row] for row in rows[1:]]  # without the header


def test_docs_table_is_the_code_table():
    lines = join_time.summary_lines(gpu_pools=True)
    code_rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines if line.startswith("| ")]
    assert doc_rows() == code_rows[1:]


def test_every_number_names_its_source_or_says_it_is_an_estimate():
    for step in join_time.STEPS:
        assert step.source == join_time.ESTIMATE or "default" in step.source or ".py" in step.source, step.name


def test_the_published_totals():
    """What the summary and docs/node-image.md publish today: a changed step shows here as a changed total."""
    vm = TYPICAL_CREATE_SECONDS["azure-native:compute:VirtualMachine"]
    assert vm in [s.seconds for s in join_time.STEPS]  # one estimate, shared with the deploy critical path
    assert join_time.total_seconds(False) == 3 * 60 + 33
    assert join_time.total_seconds(True) == 5 * 60 + 33
    assert join_time.total_seconds(False, with_image=False) - join_time.total_seconds(False) == 84


def test_the_plan_summary_prints_it_beside_the_critical_path(dev_plan):
    from infra.network.addressing import plan_addresses
    from plan.summary import render_summary
    from tests.helpers import parsed

    config = parsed("dev")
    text = render_summary("dev", config, plan_addresses(config), dev_plan.registrations)
    assert text.index("## Deploy critical path") < text.index("## Node join time")
    total = join_time.total_seconds(True)
    assert f"**GPU node: about {total // 60} min {total % 60:02d} s**" in text
