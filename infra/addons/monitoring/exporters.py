"""The exporters Prometheus scrapes that the cluster does not already run.

- **node-exporter** on every node (NAT hosts included: it tolerates every taint), host network,
  the host's root read-only: CPU, memory, disk, network and conntrack of the machine itself.
- **DCGM exporter** on every GPU node (``nvidia.com/gpu.present=true``): per-GPU utilisation,
  memory, temperature, ECC and XID errors, through the NVIDIA runtime class.
- **kube-state-metrics**: the cluster's objects as series (node conditions and taints, pods),
  one Deployment in the monitoring namespace; at 7,500 nodes it is one reader with one watch per
  resource type, like the control-plane shard that scrapes it. Both its ports ask for the stack's own
  credential (credential.py), as Prometheus's and Alertmanager's do.

Node agents live in kube-system, the one namespace Pod Security exempts for agents that need the host.
"""

from __future__ import annotations

from infra.addons import images, k8s
from infra.addons.monitoring import credential
from infra.addons.monitoring.shards import DCGM_EXPORTER_PORT, NODE_EXPORTER_PORT
from infra.addons.shared_names import NODE_CRITICAL, NVIDIA_RUNTIME_CLASS, SYSTEM_NAMESPACE, SYSTEM_PRIORITY
from infra.facts.labels import GPU_PRESENT_LABEL

NODE_EXPORTER = "node-exporter"
DCGM_EXPORTER = "dcgm-exporter"
KUBE_STATE_METRICS = "kube-state-metrics"
KUBE_STATE_METRICS_PORT = 8080  # kube-state-metrics --port default
KUBE_STATE_METRICS_TELEMETRY_PORT = 8081  # kube-state-metrics --telemetry-port default (its own metrics)
# What kube-state-metrics exposes: the resources the rules and dashboards read, nothing else
# (every extra resource is one more watch and more series at 7,500 nodes).
KUBE_STATE_METRICS_RESOURCES = ("nodes", "pods", "deployments", "daemonsets", "statefulsets", "namespaces")


def node_exporter() -> list[k8s.Obj]:
    container = {
        "name": NODE_EXPORTER,
        "image": images.NODE_EXPORTER,
        "args": [
            "--path.rootfs=/host",
            f"--web.listen-address=:{NODE_EXPORTER_PORT}",
            # Container and pod mounts are the kubelet's business (cAdvisor), not the node's.
            (
                "--collector.filesystem.mount-points-exclude=^/(dev|proc|sys|run|var/lib/kubelet/.+|"
                "var/lib/containerd/.+)($|/)"
            ),
        ],
        "ports": [{"name": "metrics", "containerPort": NODE_EXPORTER_PORT, "protocol": "TCP"}],
        "resources": k8s.resources("50m", "64Mi", "128Mi"),
        "securityContext": k8s.locked_down(),
        "readinessProbe": {"httpGet": {"path": "/", "port": NODE_EXPORTER_PORT}, "periodSeconds": 30},
        "volumeMounts": [
            {"name": "host", "mountPath": "/host", "readOnly": True, "mountPropagation": "HostToContainer"}
        ],
    }
    pod = k8s.pod_spec(
        [container],
        priority_class=NODE_CRITICAL,
        service_account=NODE_EXPORTER,
        host_network=True,
        hostPID=True,
        automountServiceAccountToken=False,
        tolerations=k8s.tolerate_everything(),
        volumes=[{"name": "host", "hostPath": {"path": "/", "type": "Directory"}}],
    )
    return [
        k8s.service_account(NODE_EXPORTER, SYSTEM_NAMESPACE, automount=False),
        k8s.daemon_set(NODE_EXPORTER, SYSTEM_NAMESPACE, pod, {"app.kubernetes.io/name": NODE_EXPORTER}, "10%"),
    ]


def dcgm_exporter() -> list[k8s.Obj]:
    container = {
        "name": DCGM_EXPORTER,
        "image": images.DCGM_EXPORTER,
        "args": [f"--address=:{DCGM_EXPORTER_PORT}"],
        "env": [
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"},
        ],
        "ports": [{"name": "metrics", "containerPort": DCGM_EXPORTER_PORT, "protocol": "TCP"}],
        "resources": k8s.resources("100m", "256Mi", "512Mi"),
        # NVIDIA_VISIBLE_DEVICES=all is honoured only for privileged containers (infra/node/gpu.py's toolkit
        # config), and the profiling fields (DCGM_FI_PROF_*) need SYS_ADMIN, which privileged includes.
        # kube-system is exempt from Pod Security.
        "securityContext": {"privileged": True},
        "readinessProbe": {"httpGet": {"path": "/health", "port": DCGM_EXPORTER_PORT}, "periodSeconds": 30},
    }
    pod = k8s.pod_spec(
        [container],
        priority_class=NODE_CRITICAL,
        service_account=DCGM_EXPORTER,
        host_network=True,
        automountServiceAccountToken=False,
        runtimeClassName=NVIDIA_RUNTIME_CLASS,
        nodeSelector={GPU_PRESENT_LABEL: "true"},
        tolerations=k8s.tolerate_everything(),
    )
    return [
        k8s.service_account(DCGM_EXPORTER, SYSTEM_NAMESPACE, automount=False),
        k8s.daemon_set(DCGM_EXPORTER, SYSTEM_NAMESPACE, pod, {"app.kubernetes.io/name": DCGM_EXPORTER}, "10%"),
    ]


def kube_state_metrics(namespace: str) -> list[k8s.Obj]:
    name = KUBE_STATE_METRICS
    read = ["list", "watch"]
    container = {
        "name": name,
        "image": images.KUBE_STATE_METRICS,
        "args": [
            f"--port={KUBE_STATE_METRICS_PORT}",
            "--resources=" + ",".join(KUBE_STATE_METRICS_RESOURCES),
            # The exporter-toolkit web config Prometheus and Alertmanager read (kube-state-metrics v2's
            # --tls-config, pkg/options/options.go; exporter-toolkit v0.13.2 asks every path of both its ports,
            # /metrics, /healthz and /debug/pprof included, for a user of basic_auth_users).
            f"--tls-config={credential.path(credential.WEB_CONFIG)}",
        ],
        "ports": [{"name": "http-metrics", "containerPort": KUBE_STATE_METRICS_PORT, "protocol": "TCP"}],
        "resources": k8s.resources("500m", "2Gi"),
        "securityContext": k8s.locked_down(),
        # Every path asks for the credential, and the image (distroless) has no tool a probe could present it
        # with; an httpGet probe's header would put the password in the pod spec. So: the port is open.
        "readinessProbe": {"tcpSocket": {"port": KUBE_STATE_METRICS_PORT}},
        "volumeMounts": [credential.volume_mount()],
    }
    pod = k8s.pod_spec(
        [container],
        priority_class=SYSTEM_PRIORITY,
        service_account=name,
        **k8s.on_system_pool(),
        volumes=[credential.volume()],
    )
    return [
        k8s.service_account(name, namespace),
        k8s.cluster_role(
            f"supercluster-{name}",
            [
                k8s.rule([""], ["nodes", "pods", "namespaces"], read),
                k8s.rule(["apps"], ["deployments", "daemonsets", "statefulsets"], read),
            ],
            app=name,
        ),
        k8s.binding(
            "ClusterRoleBinding",
            f"supercluster-{name}",
            "ClusterRole",
            f"supercluster-{name}",
            name,
            namespace,
            app=name,
        ),
        k8s.deployment(name, namespace, 1, pod, {"app.kubernetes.io/name": name}),
    ]


def objects(namespace: str) -> list[k8s.Obj]:
    return [*node_exporter(), *dcgm_exporter(), *kube_state_metrics(namespace)]
