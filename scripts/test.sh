#!/usr/bin/env bash
# Set up, then run the whole test suite in two stages: bash scripts/test.sh [pytest options...]
#   1. the fast suite (unit, component, stack and real-tool tests), one worker per core;
#   2. the cluster in a box (tests/e2e): the dev plan and prod's control-plane shape booted on the
#      real upstream binaries, built once per machine by scripts/build-binaries.sh.
# Options go to both stages. SKIP_E2E=1 runs the fast suite alone.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
# promtool (with Kubernetes discovery), amtool and dashboard-check, built from their Go modules
# (cached per machine). Without Go the tests that need them skip, or fail with CI=true.
if command -v go >/dev/null || [ "${CI:-}" = true ]; then
  SUPERCLUSTER_MONITORING_TOOLS=$(bash scripts/build-monitoring-tools.sh)
  export SUPERCLUSTER_MONITORING_TOOLS
fi
# One worker per core (pytest-xdist): the suite is CPU-bound, each test planning the stack under mocks.
.venv/bin/python -m pytest -n auto "$@"
if [ "${SKIP_E2E:-0}" != 1 ]; then
  # The Go tests of nodesim (the kubelet stand-in the harness joins nodes with) and fleet (the scale proof).
  (cd tests/e2e/go/kubernetes && GOTOOLCHAIN=local GOFLAGS=-mod=readonly go test ./...)
  # One cluster per test module, one process: the clusters' namespaces and ports must not meet.
  .venv/bin/python -m pytest tests/e2e -m e2e -p no:xdist "$@"
fi
