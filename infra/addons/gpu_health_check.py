"""GPU health check: a DCGM-based DaemonSet per GPU pool that owns the GPU start-up taint.

GPU nodes register with ``supercluster.io/gpu-unhealthy:NoSchedule``. On every GPU node a
pod runs two containers sharing a verdict file:
- ``dcgm`` (NVIDIA's DCGM image, all GPUs visible through the ``nvidia`` runtime without
  requesting any) checks that the pool's GPU count is visible and that ``dcgmi diag --run 1``
  passes, every ``intervalSeconds``;
- ``node-taint`` (machine/addons/node_taint.py) removes the taint when the verdict is healthy and
  puts it back on errors.

Least privilege: only ``node-taint`` gets a service-account token (projected, short-lived);
its role can GET and PATCH nodes, never LIST or WATCH; and a ValidatingAdmissionPolicy lets
that account change only its own node (the node name bound into its token) and only the
start-up taint.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import machine
from infra.addons import images, k8s
from infra.addons.settings import section
from infra.addons.shared_names import NODE_CRITICAL, NVIDIA_RUNTIME_CLASS, SYSTEM_NAMESPACE
from infra.config.cluster_config import ClusterConfig, NodePoolConfig
from infra.facts.labels import GPU_STARTUP_TAINT_EFFECT, GPU_STARTUP_TAINT_KEY, POOL_LABEL, ROLE_GPU, ROLE_LABEL

KEY = "gpuHealthCheck"
NAME = "gpu-health-check"
SCRIPTS = machine.PROGRAMS_DIR / "addons"
STATUS_DIR = "/run/gpu-health"
TOKEN_SECONDS = 3600
# Kubernetes binds the pod's node into service-account tokens
# (KEP-4193, ServiceAccountTokenPodNodeInfo: beta 1.30, GA 1.32).
NODE_NAME_CLAIM = "authentication.kubernetes.io/node-name"


@dataclass(frozen=True)
class Settings:
    interval_seconds: int = 300
    reconcile_seconds: int = 600


def parse(raw: Mapping[str, Any], config: ClusterConfig) -> Settings:
    s = section(KEY, raw)
    x = Settings()
    settings = Settings(
        interval_seconds=s.integer("intervalSeconds", x.interval_seconds, minimum=60, maximum=3600),
        reconcile_seconds=s.integer("reconcileSeconds", x.reconcile_seconds, minimum=60, maximum=86_400),
    )
    s.done()
    return settings


def objects(config: ClusterConfig, settings: Settings) -> list[k8s.Obj]:
    ns = SYSTEM_NAMESPACE
    account = f"system:serviceaccount:{ns}:{NAME}"
    result = [
        k8s.service_account(NAME, ns, automount=False),
        k8s.cluster_role(f"supercluster-{NAME}", [k8s.rule([""], ["nodes"], ["get", "patch"])], app=NAME),
        k8s.binding(
            "ClusterRoleBinding", f"supercluster-{NAME}", "ClusterRole", f"supercluster-{NAME}", NAME, ns, app=NAME
        ),
        k8s.config_map(
            NAME,
            ns,
            {
                "gpu_check.sh": (SCRIPTS / "gpu_check.sh").read_text(),
                "node_taint.py": (SCRIPTS / "node_taint.py").read_text(),
            },
        ),
        _own_node_policy(account),
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": k8s.metadata(f"supercluster-{NAME}", app=NAME),
            "spec": {"policyName": f"supercluster-{NAME}", "validationActions": ["Deny"]},
        },
    ]
    result += [_daemon_set(pool, settings) for pool in config.node_pools if pool.role == ROLE_GPU]
    return result


def _own_node_policy(account: str) -> k8s.Obj:
    def taints(obj: str) -> str:
        return f"(has({obj}.spec.taints) ? {obj}.spec.taints : []).filter(t, t.key != '{GPU_STARTUP_TAINT_KEY}')"

    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": k8s.metadata(f"supercluster-{NAME}", app=NAME),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes"]}
                ]
            },
            "matchConditions": [
                {"name": "gpu-health-check-only", "expression": f"request.userInfo.username == '{account}'"}
            ],
            "validations": [
                {
                    "expression": f"'{NODE_NAME_CLAIM}' in request.userInfo.extra && "
                    f"request.userInfo.extra['{NODE_NAME_CLAIM}'] == [object.metadata.name]",
                    "message": "the GPU health check may only change its own node",
                },
                {
                    "expression": f"{taints('object')} == {taints('oldObject')}",
                    "message": f"the GPU health check may only change the {GPU_STARTUP_TAINT_KEY} taint",
                },
                {
                    "expression": "object.metadata.labels == oldObject.metadata.labels && "
                    "(has(object.metadata.annotations) ? object.metadata.annotations : {}) == "
                    "(has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {}) && "
                    "(has(object.spec.unschedulable) ? object.spec.unschedulable : false) == "
                    "(has(oldObject.spec.unschedulable) ? oldObject.spec.unschedulable : false)",
                    "message": "the GPU health check may not change labels, annotations or cordon state",
                },
            ],
        },
    }


def _daemon_set(pool: NodePoolConfig, settings: Settings) -> k8s.Obj:
    status_file = f"{STATUS_DIR}/verdict"
    status_mount = {"name": "status", "mountPath": STATUS_DIR}
    scripts_mount = {"name": "scripts", "mountPath": "/opt/gpu-health", "readOnly": True}
    dcgm = {
        "name": "dcgm",
        "image": images.DCGM,
        "command": ["/bin/bash", "/opt/gpu-health/gpu_check.sh"],
        "env": [
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"},
            {"name": "EXPECTED_GPUS", "value": str(pool.size.gpus)},
            {"name": "INTERVAL_SECONDS", "value": str(settings.interval_seconds)},
            {"name": "STATUS_FILE", "value": status_file},
        ],
        "resources": k8s.resources("100m", "256Mi", "1Gi"),
        # Privileged: it must see every GPU of the node without holding one, and the toolkit honours
        # NVIDIA_VISIBLE_DEVICES=all only for privileged containers (infra/node/gpu.py); DCGM's diagnostics
        # also need SYS_ADMIN, which privileged includes. kube-system is exempt from Pod Security.
        "securityContext": {"privileged": True},
        "volumeMounts": [status_mount, scripts_mount],
    }
    tainter = {
        "name": "node-taint",
        "image": images.PYTHON,
        "command": ["python3", "/opt/gpu-health/node_taint.py"],
        "env": [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "TAINT_KEY", "value": GPU_STARTUP_TAINT_KEY},
            {"name": "TAINT_EFFECT", "value": GPU_STARTUP_TAINT_EFFECT},
            {"name": "STATUS_FILE", "value": status_file},
            {"name": "RECONCILE_SECONDS", "value": str(settings.reconcile_seconds)},
        ],
        "resources": k8s.resources("10m", "32Mi", "64Mi"),
        "securityContext": k8s.locked_down(),
        "volumeMounts": [
            {**status_mount, "readOnly": True},
            scripts_mount,
            {"name": "token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True},
        ],
    }
    pod = k8s.pod_spec(
        [dcgm, tainter],
        priority_class=NODE_CRITICAL,
        service_account=NAME,
        automountServiceAccountToken=False,  # only node-taint gets a token, through the volume below
        runtimeClassName=NVIDIA_RUNTIME_CLASS,
        nodeSelector={ROLE_LABEL: ROLE_GPU, POOL_LABEL: pool.name},
        tolerations=k8s.tolerate_everything(),
        volumes=[
            {"name": "status", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
            {"name": "scripts", "configMap": {"name": NAME}},
            {
                "name": "token",
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_SECONDS}},
                        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    ]
                },
            },
        ],
    )
    name = f"{NAME}-{pool.name}"
    return k8s.daemon_set(
        name,
        SYSTEM_NAMESPACE,
        pod,
        {"app.kubernetes.io/name": name},
        "10%",
        app=name,
        provides=[f"lifts-taint:{GPU_STARTUP_TAINT_KEY}"],
    )
