#!/bin/bash
# supercluster: a GPU node must see all its GPUs, and have the NVIDIA container runtime, before
# kubelet registers it, the runtime at least the toolkit release with the container-escape fixes.
# Parameters from the unit: GPUS (the count the VM size has), TOOLKIT_FLOOR.
set -euo pipefail
seen=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | wc -l)
if [ "$seen" -ne "$GPUS" ]; then
  echo "gpu-check: nvidia-smi sees $seen GPUs, the VM size has $GPUS" >&2
  exit 1
fi
runtime=${NVIDIA_RUNTIME:-/usr/bin/nvidia-container-runtime}
if [ ! -x "$runtime" ]; then
  echo "gpu-check: $runtime is missing (expected on the HPC image)" >&2
  exit 1
fi
# TOOLKIT_FLOOR (from the unit): the oldest NVIDIA Container Toolkit with the container-escape fixes.
have=$("$runtime" --version 2>/dev/null | awk '/^NVIDIA Container Runtime version /{print $5; exit}' || true)
if [ -z "$have" ] || [ "$(printf '%s\n%s\n' "$TOOLKIT_FLOOR" "$have" | sort -V | sed -n 1p)" != "$TOOLKIT_FLOOR" ]; then
  echo "gpu-check: $runtime reports version '${have:-none}', older than $TOOLKIT_FLOOR (container-escape fixes):" \
    "boot an image with a newer NVIDIA Container Toolkit (docs/node-image.md)" >&2
  exit 1
fi
