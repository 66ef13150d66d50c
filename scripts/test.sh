#!/usr/bin/env bash
# Set up, then run the whole test suite: bash scripts/test.sh [pytest options...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
