#!/usr/bin/env bash
# Set up, then run the offline plan of a stack: bash scripts/plan.sh [STACK] [plan options...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
stack=${1:-prod}
shift || true
exec .venv/bin/python -m plan --stack "$stack" "$@"
