#!/usr/bin/env bash
# Set up, then run the whole test suite in three stages: bash scripts/test.sh [pytest options...]
#   1. the fast suite (unit, component and stack tests), one worker per core: under a minute;
#   2. the slow tests (-m slow): real etcd clusters, promtool and amtool, rules loaded into network
#      namespaces, mypy on sample programs, multi-deploy sequences;
#   3. the cluster in a box (tests/e2e): the dev plan and prod's control-plane shape booted on the
#      real upstream binaries, built once per machine by scripts/build-binaries.sh.
# Options go to every stage. SKIP_E2E=1 runs stages 1 and 2 only (refused with CI=true). Each stage
# prints its time.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# CI must never drop the cluster in a box quietly: it is the only stage that runs the real binaries.
if [ "${SKIP_E2E:-0}" = 1 ] && [ "${CI:-}" = true ]; then
  echo "test.sh: SKIP_E2E=1 is refused with CI=true (CI runs every stage, the cluster in a box included)" >&2
  exit 2
fi
bash scripts/setup.sh
# promtool (with Kubernetes discovery), amtool and dashboard-check, built from their Go modules
# (cached per machine). Without Go the tests that need them skip, or fail with CI=true.
if command -v go >/dev/null || [ "${CI:-}" = true ]; then
  SUPERCLUSTER_MONITORING_TOOLS=$(bash scripts/build-monitoring-tools.sh)
  export SUPERCLUSTER_MONITORING_TOOLS
fi
stage() {
  local name=$1 started=$SECONDS
  shift
  "$@"
  echo "test.sh: $name took $((SECONDS - started)) s" >&2
}
# One worker per core (pytest-xdist): the suite is CPU-bound, each test planning the stack under mocks. A test
# file runs whole on one worker (--dist loadfile), so its module fixtures (plans, schemas, parsed trees) are built
# once, not once per worker: 8 to 10 % less CPU than spreading single tests, measured twice each in turns.
stage "the fast suite" .venv/bin/python -m pytest -n auto --dist loadfile "$@"
stage "the slow tests" .venv/bin/python -m pytest -n auto -m slow "$@"
if [ "${SKIP_E2E:-0}" != 1 ]; then
  # The Go tests of nodesim (the kubelet stand-in the harness joins nodes with) and fleet (the scale proof).
  stage "the Go tests" bash -c 'cd tests/e2e/go/kubernetes && GOTOOLCHAIN=local GOFLAGS=-mod=readonly go test ./...'
  # One cluster per test module, one process: the clusters' namespaces and ports must not meet.
  # Of the fault suite, the apiserver, etcd-leader and events-etcd scenarios run here; the rest (marked
  # faults) by the command in docs/reliability.md.
  stage "the cluster in a box" .venv/bin/python -m pytest tests/e2e -m "e2e and not faults" -p no:xdist "$@"
fi
