"""Shared fixtures: whole-stack plans are computed once per session, since many tests read them."""

from __future__ import annotations

import gc

import pytest

from infra.plan.runner import ProgramRun, run_program
from infra.plan.stackfile import load_stack_config


def plan_stack(stack: str, *overrides: str) -> ProgramRun:
    """Runs the real program for a stack file, with ``pulumi config set --path``-style overrides."""
    return run_program(stack, load_stack_config(stack, list(overrides)))


@pytest.fixture(scope="session")
def dev_plan() -> ProgramRun:
    return plan_stack("dev")


@pytest.fixture(scope="session")
def prod_plan() -> ProgramRun:
    return plan_stack("prod")


def pytest_collection_finish(session) -> None:
    """What collection imported (the SDK modules, ~300,000 objects) lives as long as the session: frozen,
    the garbage collector stops rescanning it on every full collection (README "Performance")."""
    gc.freeze()
