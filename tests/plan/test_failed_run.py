"""A failed program run (plan/runner.py) raises its error once, to its caller, and leaves nothing to log it again.

The SDK keeps an errored output's future in its set of outputs "to pick up at program exit", and that set outlives
the run: ``pulumi._utils.ContextProperty`` keeps the first value set in a context as its default for every later
one. Dropped at the next run, or at the process's exit, its futures logged "Future exception was never retrieved"
(seen at xdist workers' exit in the fast suite, after the hub contract tests' failed runs)."""

from __future__ import annotations

import gc
import logging

import pulumi
import pytest
from pulumi_azure_native import resources as azure_resources

from plan.runner import run_declarations


def _fails(_: object) -> None:
    raise ValueError("the program's own error")


def _three_resources_on_a_failed_output() -> None:
    """As the hub's program fails on a broken contract: resources whose input is an output that raised."""
    failed = pulumi.Output.from_input(1).apply(_fails)
    for n in range(3):
        azure_resources.ResourceGroup(f"rg{n}", tags={"t": failed})


def test_a_failed_runs_error_is_raised_and_not_logged_again_when_the_next_run_drops_it(caplog):
    caplog.set_level(logging.ERROR, logger="asyncio")
    with pytest.raises(ValueError, match="the program's own error"):
        run_declarations(_three_resources_on_a_failed_output)
    run_declarations(lambda: None)  # the SDK's set of outputs is replaced by this run's
    gc.collect()
    assert not [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()]
