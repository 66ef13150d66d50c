#!/bin/bash
# GPU health check, one verdict per interval, written to $STATUS_FILE:
#   "healthy"                 every expected GPU is visible and DCGM's quick diagnostic passes
#   "unhealthy: <reason>"     anything else
# The node-taint container next to this one turns the verdict into the node's start-up taint.
set -u

# DCGM's host engine, in the foreground of a background job, listening on loopback only.
nv-hostengine -n -b 127.0.0.1 &

check() {
    local visible
    visible=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
    if [ "$visible" -ne "$EXPECTED_GPUS" ]; then
        echo "unhealthy: ${visible} of ${EXPECTED_GPUS} GPUs visible"
        return
    fi
    # Level 1 ("quick"): software deployment checks, seconds long, safe next to running jobs.
    if ! dcgmi diag --run 1 > /tmp/diag.log 2>&1; then
        echo "unhealthy: dcgmi diag --run 1 failed: $(tail -n 5 /tmp/diag.log | tr -s '\n' ' ')"
        return
    fi
    echo "healthy"
}

while true; do
    check > "${STATUS_FILE}.tmp" && mv "${STATUS_FILE}.tmp" "$STATUS_FILE"
    sleep "$INTERVAL_SECONDS"
done
