"""The HTTPS ports kube-scheduler and kube-controller-manager serve /healthz and /metrics on.

Defined here, below every module that needs them: ``infra.control_plane`` renders the flags (and
re-exports each as its component's ``SECURE_PORT``), ``infra.network_security`` opens them to the
monitoring pools, and ``infra.addons.monitoring`` scrapes them. The add-ons cannot import
``infra.control_plane`` (which builds on ``infra.cluster``, which builds the add-ons): the import
contract in pyproject.toml forbids the cycle.
"""

from __future__ import annotations

# kube-scheduler's --secure-port default (kube-scheduler command-line reference;
# DefaultKubeSchedulerPort in kubernetes pkg/scheduler/apis/config/types.go), left at its default.
SCHEDULER = 10259
# kube-controller-manager's --secure-port default (kube-controller-manager command-line reference;
# KubeControllerManagerPort in kubernetes pkg/cluster/ports/ports.go), left at its default.
CONTROLLER_MANAGER = 10257
