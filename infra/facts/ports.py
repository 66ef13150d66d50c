"""The TCP ports the control plane listens on, which renderers, NSGs, probes and scrapes all name."""

from __future__ import annotations

# kube-apiserver's --secure-port default (kube-apiserver command-line reference), kept: clients,
# the internal load balancer and the contract's endpoint all use it.
APISERVER = 6443
# IANA-assigned etcd ports (client, peer); 2381 is the metrics port kubeadm uses for etcd's plain-HTTP
# /metrics and /health listener.
ETCD_CLIENT = 2379
ETCD_PEER = 2380
ETCD_METRICS = 2381
# kube-scheduler's --secure-port default (kube-scheduler command-line reference;
# DefaultKubeSchedulerPort in kubernetes pkg/scheduler/apis/config/types.go), left at its default.
SCHEDULER = 10259
# kube-controller-manager's --secure-port default (kube-controller-manager command-line reference;
# KubeControllerManagerPort in kubernetes pkg/cluster/ports/ports.go), left at its default.
CONTROLLER_MANAGER = 10257
# The bootstrap-token minter's plain-HTTP /metrics on each apiserver VM (infra/control_plane/token_minting.py):
# this project's choice, beside the etcd machines' backup metrics (9479), used by nothing else there.
TOKEN_MINTER_METRICS = 9480
# sshd's port on every machine (IANA): break-glass from the hub, and MPI's launcher between pods.
SSH = 22
