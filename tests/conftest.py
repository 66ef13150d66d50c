"""Shared fixtures: whole-stack plans are computed once per session, since many tests read them."""

from __future__ import annotations

import gc
from collections.abc import Callable

import pytest

from infra.config.errors import ConfigError
from plan import runner
from plan.artifacts import collect_files
from plan.diff import Plan
from plan.runner import ProgramRun, own_stack_name, run_program
from plan.stackfile import load_stack_config

# dev with its cpu pool retired (no new nodes, no warm nodes): the first of the two deploys that remove it.
# dev's GPU pool: its CPU pool cannot go, CoreDNS runs there (infra/cluster/whole_cluster.py).
RETIRE_GPU = ("nodePools[0].retired=true",)


def plan_stack(stack: str, *overrides: str) -> ProgramRun:
    """Runs the real program for a stack file, with ``pulumi config set --path``-style overrides."""
    return run_program(stack, load_stack_config(stack, list(overrides)))


def deploy_after(previous: ProgramRun, *overrides: str, stack: str | None = None) -> ProgramRun:
    """The next deploy of ``previous``'s stack: the program reads ``previous``'s outputs as its last deploy's."""
    stack = stack or previous.stack
    return run_program(stack, load_stack_config(stack, list(overrides)), {own_stack_name(stack): previous.outputs})


def as_plan(run: ProgramRun) -> Plan:
    """What ``python -m plan`` would write for this run, as ``plan.diff`` reads it (no disk)."""
    return Plan(
        {r.urn: r.as_json() for r in run.registrations},
        run.outputs,
        collect_files(run.registrations, run.encoded, run.write_files),
    )


def azure_declared_before_refusal(monkeypatch, program: Callable[[], object], refusal: str) -> list[str]:
    """Runs ``program`` (a ``run_program`` call) expecting a ConfigError matching ``refusal``, and returns the
    resources it had declared by then: a refused change must reach Azure with nothing (Pulumi deletes only after
    a program that succeeded). The checks against the last deploy run in the assembly, before the program
    declares its first resource, so a refused run declares nothing at all."""
    monitors: list[runner.RecordingMonitor] = []

    class Recording(runner.RecordingMonitor):
        def __init__(self, mocks):
            super().__init__(mocks)
            monitors.append(self)

    monkeypatch.setattr(runner, "RecordingMonitor", Recording)
    with pytest.raises(ConfigError, match=refusal):
        program()
    [monitor] = monitors
    return [r.name for r in monitor.registrations]


@pytest.fixture(scope="session")
def dev_plan() -> ProgramRun:
    return plan_stack("dev")


@pytest.fixture(scope="session")
def prod_plan() -> ProgramRun:
    return plan_stack("prod")


@pytest.fixture(scope="session")
def retired_gpu_plan(dev_plan) -> ProgramRun:
    return deploy_after(dev_plan, *RETIRE_GPU)


def pytest_collection_finish(session) -> None:
    """What collection imported (the SDK modules, ~300,000 objects) lives as long as the session: frozen,
    the garbage collector stops rescanning it on every full collection (docs/performance.md)."""
    gc.freeze()
