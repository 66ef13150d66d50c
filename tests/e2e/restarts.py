"""A unit that restarts during a test fails that test, naming the unit and its last log lines.

The harness runs every unit with ``Restart=`` in a restart loop, as systemd would, so a
controller-manager, scheduler or etcd member that crashes comes back and the cluster still
answers: without this check a crash-looping component passes. These pytest hooks (installed by
tests/e2e/conftest.py, so every e2e test gets them) count each process's restarts after every
test's setup and call, and fail the phase in which a count grew. A process a test starts counts
from its start; one started while a cluster boots (in a fixture) counts from the end of the boot,
since a component may exit until what it needs is up (below). A crash loop goes on and is
caught in the next test. A test that makes a unit exit on purpose names it in
``@pytest.mark.restarts_expected("unit", reason=...)``.
"""

from __future__ import annotations

import pytest

from tests.e2e.hosts import OPEN_NETWORKS, RESTARTED, Process

LOG_LINES = 15  # of each restarted unit's log, in the failure


def restart_counts() -> dict[int, tuple[Process, int]]:
    """``{id(process): (process, restarts)}`` of every process of every open network."""
    return {id(p): (p, p.restarts()) for network in OPEN_NETWORKS for p in network.processes}


def restarted(
    before: dict[int, tuple[Process, int]],
    now: dict[int, tuple[Process, int]],
    allowed: frozenset[str] = frozenset(),
    count_new: bool = True,
) -> list[str]:
    """One paragraph per process whose count grew from ``before`` to ``now`` (a process new since
    ``before`` counts from its start, or not at all without ``count_new``): its host, unit, how often,
    and the log lines that led to its last restart."""
    reports = []
    for key, (process, count) in now.items():
        if key not in before and not count_new:
            continue
        earlier = before[key][1] if key in before else 0
        if count > earlier and process.name not in allowed:
            lines = process.output().splitlines()
            last = max(i for i, line in enumerate(lines) if RESTARTED in line)
            tail = "\n    ".join(lines[max(0, last + 1 - LOG_LINES) : last + 1])
            reports.append(
                f"{process.host.name} {process.name} restarted {count - earlier} time(s); "
                f"its log up to the last restart:\n    {tail}"
            )
    return reports


# The counts at the end of the last check: a restart between two tests is charged to the next phase.
_checked_counts: dict[int, tuple[Process, int]] = {}


def _checked(phase: str, item: pytest.Item, count_new: bool):
    failure: BaseException | None = None
    try:
        result = yield
    except BaseException as error:  # noqa: BLE001 - re-raised below, with the restarts noted
        failure = error
    now = restart_counts()
    reports = restarted(_checked_counts, now, _allowed(item), count_new)
    _checked_counts.update(now)
    message = f"a unit restarted during {phase}:\n" + "\n".join(reports)
    if failure is not None:
        if reports:
            failure.add_note(message)
        raise failure
    if reports:
        pytest.fail(message, pytrace=False)
    return result


def _allowed(item: pytest.Item) -> frozenset[str]:
    """The units the test names as expected to restart (``x.service`` or ``x``: processes are named ``x``)."""
    marks = item.iter_markers("restarts_expected")
    return frozenset(unit.removesuffix(".service") for mark in marks for unit in mark.args)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    # Units started while a cluster boots count from the end of the boot: a unit may exit until what it
    # needs answers, which Restart= absorbs on Azure too (the controller-manager and scheduler wait for
    # their apiserver's /readyz instead: their ExecStartPre). Restarts of units already running count.
    return (yield from _checked("setup", item, count_new=False))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    return (yield from _checked("the test", item, count_new=True))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "restarts_expected(*units, reason): these units may restart during the test, and why"
    )
