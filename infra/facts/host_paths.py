"""Host paths more than one machine renderer or add-on names."""

from __future__ import annotations

# kubelet's state directory: its --root-dir default (kubelet command-line reference), which nodes keep
# (infra/node/kubelet.py sets no --root-dir) and bind onto the local SSD (infra/node/state_disk.py).
KUBELET_ROOT = "/var/lib/kubelet"
# Where a node mounts its local SSDs (NVMe RAID0 or the temp disk): containerd's root, kubelet's root
# (bound onto it) and each Prometheus's TSDB (a hostPath, infra/addons/monitoring) live there.
LOCAL_SSD_MOUNT = "/var/lib/local-ssd"
