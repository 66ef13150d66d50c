"""The NVIDIA device plugin: advertises each GPU node's GPUs to kubelet as ``nvidia.com/gpu``.

A DaemonSet that selects GPU nodes only (``supercluster.io/role=gpu``), runs through the
``nvidia`` runtime class (its scheduling also pins it to GPU nodes) and tolerates every
taint, the GPU start-up taint included: the GPUs must be advertised for the health check's
verdict to matter. It talks to kubelet's device-plugin socket only, never to the apiserver.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from infra.addons import images, k8s
from infra.addons.settings import section
from infra.addons.shared_names import DEVICE_PLUGIN_DIR, NODE_CRITICAL, NVIDIA_RUNTIME_CLASS, SYSTEM_NAMESPACE
from infra.config.cluster_config import ClusterConfig
from infra.facts.labels import GPU_RESOURCE, ROLE_GPU, ROLE_LABEL

KEY = "nvidiaDevicePlugin"
NAME = "nvidia-device-plugin"
GPU_NODE_SELECTOR = {ROLE_LABEL: ROLE_GPU}


@dataclass(frozen=True)
class Settings:
    pass


def parse(raw: Mapping[str, Any], config: ClusterConfig) -> Settings:
    section(KEY, raw).done()  # no settings: anything given is a mistake
    return Settings()


def objects() -> list[k8s.Obj]:
    ns = SYSTEM_NAMESPACE
    container = {
        "name": NAME,
        "image": images.NVIDIA_DEVICE_PLUGIN,
        "env": [
            # A node with a GPU the plugin cannot initialise must fail loudly, not advertise zero GPUs.
            {"name": "FAIL_ON_INIT_ERROR", "value": "true"},
            # The GPUs a pod was allocated reach the runtime as volume mounts the pod cannot forge; the
            # toolkit ignores NVIDIA_VISIBLE_DEVICES from unprivileged pods (infra/node/gpu.py).
            {"name": "DEVICE_LIST_STRATEGY", "value": "volume-mounts"},
            {"name": "DEVICE_ID_STRATEGY", "value": "uuid"},
        ],
        "resources": k8s.resources("50m", "64Mi", "256Mi"),
        # Privileged: the toolkit honours NVIDIA_VISIBLE_DEVICES=all (the image's) for privileged containers
        # only, and the plugin must see every GPU to advertise them. kube-system is exempt from Pod Security.
        "securityContext": {"privileged": True, "readOnlyRootFilesystem": True},
        "volumeMounts": [{"name": "device-plugin", "mountPath": DEVICE_PLUGIN_DIR}],
    }
    pod = k8s.pod_spec(
        [container],
        priority_class=NODE_CRITICAL,
        service_account=NAME,
        automountServiceAccountToken=False,
        runtimeClassName=NVIDIA_RUNTIME_CLASS,
        nodeSelector=dict(GPU_NODE_SELECTOR),
        tolerations=k8s.tolerate_everything(),
        volumes=[{"name": "device-plugin", "hostPath": {"path": DEVICE_PLUGIN_DIR, "type": "Directory"}}],
    )
    return [
        k8s.service_account(NAME, ns, automount=False),
        k8s.daemon_set(NAME, ns, pod, {"app.kubernetes.io/name": NAME}, 1, provides=[f"resource:{GPU_RESOURCE}"]),
    ]
