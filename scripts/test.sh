#!/usr/bin/env bash
# Set up, then run the whole test suite: bash scripts/test.sh [pytest options...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
# One worker per core (pytest-xdist): the suite is CPU-bound, each test planning the stack under mocks.
exec .venv/bin/python -m pytest -n auto "$@"
