#!/bin/bash
# supercluster: a GPU node must see all its GPUs, and have the NVIDIA container runtime, before
# kubelet registers it. Parameter from the unit: GPUS (the count the VM size has).
set -euo pipefail
seen=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | wc -l)
if [ "$seen" -ne "$GPUS" ]; then
  echo "gpu-check: nvidia-smi sees $seen GPUs, the VM size has $GPUS" >&2
  exit 1
fi
if [ ! -x /usr/bin/nvidia-container-runtime ]; then
  echo "gpu-check: /usr/bin/nvidia-container-runtime is missing (expected on the HPC image)" >&2
  exit 1
fi
