"""scripts/test.sh, the command .ci/run and the README run: what it refuses before running anything."""

from __future__ import annotations

import os
import subprocess

from plan.stackfile import PROJECT_DIR

TEST_SCRIPT = PROJECT_DIR / "scripts" / "test.sh"


def test_ci_refuses_to_skip_the_cluster_in_a_box_with_one_line():
    env = {**os.environ, "CI": "true", "SKIP_E2E": "1"}
    result = subprocess.run(["bash", str(TEST_SCRIPT)], capture_output=True, text=True, env=env, timeout=30)
    assert result.returncode == 2
    assert result.stdout == ""  # refused before setup or any stage ran
    (line,) = result.stderr.splitlines()
    assert "SKIP_E2E=1" in line and "CI=true" in line
