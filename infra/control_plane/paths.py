"""Where control-plane files live on an apiserver VM, named once so units, flags and kubeconfigs agree."""

from __future__ import annotations

from infra.boot.secret_names import KUBERNETES_PKI_DIR

KUBERNETES_DIR = "/etc/kubernetes"
PKI_DIR = KUBERNETES_PKI_DIR
BIN_DIR = "/usr/local/bin"

AUDIT_POLICY = f"{KUBERNETES_DIR}/audit-policy.yaml"
AUDIT_LOG_DIR = "/var/log/kubernetes/audit"
AUDIT_LOG = f"{AUDIT_LOG_DIR}/audit.log"
AUTHENTICATION_CONFIG = f"{KUBERNETES_DIR}/authentication-config.yaml"
ENCRYPTION_CONFIG = f"{KUBERNETES_DIR}/encryption-config.yaml"
ADMISSION_CONFIG = f"{KUBERNETES_DIR}/admission-config.yaml"
SCHEDULER_CONFIG = f"{KUBERNETES_DIR}/kube-scheduler-config.yaml"
CONTROLLER_MANAGER_KUBECONFIG = f"{KUBERNETES_DIR}/controller-manager.conf"
SCHEDULER_KUBECONFIG = f"{KUBERNETES_DIR}/scheduler.conf"

INSTALL_SCRIPT = "/usr/local/sbin/supercluster-install-control-plane"
INSTALL_UNIT = "supercluster-control-plane-install.service"
APISERVER_UNIT = "kube-apiserver.service"
CONTROLLER_MANAGER_UNIT = "kube-controller-manager.service"
SCHEDULER_UNIT = "kube-scheduler.service"
COMPONENT_UNITS = (APISERVER_UNIT, CONTROLLER_MANAGER_UNIT, SCHEDULER_UNIT)
