"""The restart check (tests/e2e/restarts.py) fails a test in which a unit restarted, and only that test.

An inner pytest run with the check's hooks: one test's unit crash-loops, one runs steadily, and
one names the crash-looping unit as expected. Each test has a network of its own with one host
(no cluster is booted: a few seconds).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from plan.stackfile import PROJECT_DIR

pytestmark = pytest.mark.e2e

INNER = """
import os
import time
from pathlib import Path

import pytest

from tests.e2e import hosts


@pytest.fixture
def network(tmp_path):
    network = hosts.TestNetwork(f"rs{os.getpid() % 100000}", tmp_path, Path("/bin")).open()
    try:
        yield network, network.add_host("crashy", ["192.0.2.1/24"])
    finally:
        network.close()


def crash_loop(network, host):
    process = network.start(host, "kube-scheduler", ["sh", "-c", "echo the last words; exit 3"], restart_sec=0.1)
    hosts.wait_for("a restart", lambda: process.restarts() >= 2, timeout=20)


def test_crash_looping(network):
    crash_loop(*network)


def test_steady(network):
    network[0].start(network[1], "etcd", ["sleep", "60"], restart_sec=0.1)
    time.sleep(1)


@pytest.mark.restarts_expected("kube-scheduler.service", reason="the test makes it exit")
def test_expected(network):
    crash_loop(*network)


@pytest.fixture
def settled(network, tmp_path):
    # Started while "booting": exits once at start-up, then runs.
    network, host = network
    flag = tmp_path / "started-once"
    once = f"[ -e {flag} ] && exec sleep 60; touch {flag}; echo forbidden at start-up; exit 1"
    unit = network.start(host, "kube-controller-manager", ["sh", "-c", once], restart_sec=0.1)
    hosts.wait_for("a restart while booting", lambda: unit.restarts() == 1, timeout=20)


@pytest.fixture
def looping(network):
    # Started while "booting": crash-loops.
    network, host = network
    unit = network.start(host, "etcd", ["sh", "-c", "echo member lost; exit 2"], restart_sec=0.1)
    hosts.wait_for("a restart while booting", lambda: unit.restarts() >= 1, timeout=20)
    return unit


def test_a_start_up_restart_while_booting_is_not_counted(settled):
    time.sleep(1)


def test_a_crash_loop_that_began_while_booting_is_caught_in_the_test(looping):
    count = looping.restarts()
    hosts.wait_for("more restarts", lambda: looping.restarts() >= count + 2, timeout=20)
"""


def test_a_unit_restarting_fails_the_test_naming_the_unit_and_its_last_log_lines(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root for network namespaces")
    (tmp_path / "test_inner.py").write_text(INNER)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.e2e.restarts", "-p", "no:cacheprovider", "-rA", "test_inner.py"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(PROJECT_DIR)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = result.stdout
    assert "2 failed, 3 passed" in out, out
    assert "FAILED test_inner.py::test_crash_looping" in out, out
    assert "crashy kube-scheduler restarted" in out and "the last words" in out, out
    assert "FAILED test_inner.py::test_a_crash_loop_that_began_while_booting_is_caught_in_the_test" in out, out
    assert "crashy etcd restarted" in out and "member lost" in out, out
    assert "kube-controller-manager restarted" not in out, out
