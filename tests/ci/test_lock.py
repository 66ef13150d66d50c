"""requirements.lock is requirements.in, resolved: every top-level pin is in the lock at the same
version, every locked package carries hashes (so scripts/setup.sh's ``--require-hashes`` install
accepts it), and the environment the tests run in is the lock's. Regenerate with scripts/lock.sh."""

from __future__ import annotations

import re
from importlib.metadata import version

from plan.stackfile import PROJECT_DIR

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def top_level_pins() -> dict[str, str]:
    pins = {}
    for line in (PROJECT_DIR / "requirements.in").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            match = PIN.match(line)
            assert match, f"requirements.in: {line!r} is not NAME==VERSION"
            pins[_canonical(match.group(1))] = match.group(2)
    return pins


def locked() -> dict[str, tuple[str, int]]:
    """``{package: (version, number of hashes)}`` from requirements.lock."""
    result: dict[str, tuple[str, int]] = {}
    current = None
    for line in (PROJECT_DIR / "requirements.lock").read_text().splitlines():
        match = PIN.match(line)
        if match:
            current = _canonical(match.group(1))
            result[current] = (match.group(2), 0)
        elif line.strip().startswith("--hash=sha256:") and current is not None:
            result[current] = (result[current][0], result[current][1] + 1)
    return result


def test_every_top_level_pin_is_locked_at_its_version():
    lock = locked()
    drift = {
        name: (pinned, lock.get(name, ("missing", 0))[0])
        for name, pinned in top_level_pins().items()
        if lock.get(name, ("missing", 0))[0] != pinned
    }
    assert not drift, f"requirements.lock is stale ({{package: (requirements.in, lock)}}: {drift}); run scripts/lock.sh"


def test_every_locked_package_has_hashes_and_protobuf_and_grpcio_are_among_them():
    lock = locked()
    assert {"protobuf", "grpcio", "pulumi"} <= set(lock)
    assert not [name for name, (_, hashes) in lock.items() if hashes == 0]


def test_the_tests_run_on_the_locked_sdk():
    """What the plan records depends on the Pulumi SDK and its protobuf/grpcio: they must be the lock's."""
    lock = locked()
    for package in ("pulumi", "pulumi-azure-native", "protobuf", "grpcio"):
        installed, pinned = version(package), lock[package][0]
        assert installed == pinned, f"{package}: installed {installed}, locked {pinned}; run scripts/setup.sh"
