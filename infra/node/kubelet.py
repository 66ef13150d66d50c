"""kubelet: its KubeletConfiguration, the TLS-bootstrap kubeconfig, the providerID drop-in, the image
credential provider for the cluster's registry and the unit.

A node joins with a client certificate its boot program asked for before kubelet starts, with Azure's proof of
the machine (infra/node/join.py); kubelet then rotates it as the node (``rotateCertificates``). The bootstrap
kubeconfig names the token *file* (``tokenFile``) that the Key Vault fetch writes at boot, so customData holds
no secret; kubelet uses it only if it finds no valid certificate.
Every add-on image is on the cluster's registry (infra/addons/images.py), which refuses
anonymous pulls: kubelet asks its exec credential provider (``machine/node/acr-credential-provider.py``)
for a registry token, obtained with the node's own identity.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import machine
from infra.boot import systemd, yaml_text
from infra.boot.cloudinit import CloudConfig
from infra.boot.secret_names import CLUSTER_CA_CERT, NODE_BOOTSTRAP_TOKEN, NODE_JOIN_FILES
from infra.boot.secrets import FETCH_UNIT
from infra.config.cluster_config import Taint
from infra.facts.host_paths import KUBELET_ROOT
from infra.network.addressing import CLUSTER_DOMAIN
from infra.node import cni, containerd, install, pinned_images, seccomp, state_disk
from infra.node import gpu as gpu_check

UNIT = "kubelet.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT}"
CONFIG_PATH = "/etc/kubernetes/kubelet-config.yaml"
DROP_IN_DIR = "/etc/kubernetes/kubelet.conf.d"
PROVIDER_ID_PATH = f"{DROP_IN_DIR}/10-provider-id.conf"
PROVIDER_ID_SCRIPT = "/usr/local/sbin/supercluster-provider-id"
BOOTSTRAP_KUBECONFIG = "/etc/kubernetes/bootstrap-kubelet.conf"
# The boot program that gets kubelet its first client certificate with Azure's proof of the machine
# (infra/node/join.py); kubelet requires it.
JOIN_UNIT = "supercluster-node-join.service"
KUBECONFIG = f"{KUBELET_ROOT}/kubeconfig"  # written by kubelet after bootstrapping
CERT_DIR = f"{KUBELET_ROOT}/pki"
# kubelet's rotated client certificate and key, in one file it keeps current (kubelet --cert-dir docs).
CLIENT_CERT = f"{CERT_DIR}/kubelet-client-current.pem"
CA_PATH = next(f.path for f in NODE_JOIN_FILES if f.secret_name == CLUSTER_CA_CERT)
TOKEN_PATH = next(f.path for f in NODE_JOIN_FILES if f.secret_name == NODE_BOOTSTRAP_TOKEN)
# Equal to containerd's concurrent layer downloads (kubernetes.md §2a: bound parallelism, not unlimited).
MAX_PARALLEL_IMAGE_PULLS = 10
# Ubuntu runs systemd-resolved: the stub at 127.0.0.53 in /etc/resolv.conf is unreachable from a pod's
# network namespace, so kubelet must hand pods the real upstream list (kubeadm does the same).
RESOLV_CONF = "/run/systemd/resolve/resolv.conf"
# CIS Kubernetes Benchmark 4.2.12: the kubelet's serving TLS only with these (TLS 1.3 suites are not configurable
# and always strong).
TLS_CIPHER_SUITES = (
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
)
# CIS 4.1.1, 4.1.5, 4.1.9: the kubelet's unit, kubeconfigs and config file readable by root only.
PRIVATE = "0600"
# kubelet --image-credential-provider-config / --image-credential-provider-bin-dir (flags only: the
# KubeletConfiguration has no field for them); the plugin's file name is the provider's name.
CREDENTIAL_PROVIDER_CONFIG = "/etc/kubernetes/image-credential-providers.yaml"
CREDENTIAL_PROVIDER_DIR, CREDENTIAL_PROVIDER = pinned_images.CREDENTIAL_PROVIDER_DIR, pinned_images.CREDENTIAL_PROVIDER
# kubelet caches each answer this long unless the plugin says otherwise (it does:
# machine/node/acr-credential-provider.py).
CREDENTIAL_CACHE = "1h"


def credential_provider_config(registry: str) -> dict[str, Any]:
    """CredentialProviderConfig (kubelet.config.k8s.io/v1, GA since Kubernetes 1.26): our plugin for the
    cluster's registry only; any other registry gets no credentials."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1",
        "kind": "CredentialProviderConfig",
        "providers": [
            {
                "name": CREDENTIAL_PROVIDER,
                "apiVersion": "credentialprovider.kubelet.k8s.io/v1",
                "matchImages": [registry],
                "defaultCacheDuration": CREDENTIAL_CACHE,
                "args": [registry],
            }
        ],
    }


def config(*, cluster_dns: str, max_pods: int, taints: Sequence[Taint]) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": CA_PATH},
        },
        "authorization": {"mode": "Webhook"},
        "readOnlyPort": 0,
        "tlsCipherSuites": list(TLS_CIPHER_SUITES),
        "rotateCertificates": True,
        # The serving certificate from the cluster CA too, requested through a kubernetes.io/kubelet-serving CSR
        # and rotated like the client one; approved only for its VM's name and addresses in Azure's word
        # (infra/control_plane/csr_approval.py). Until then kubelet serves no logs, exec or metrics.
        "serverTLSBootstrap": True,
        "protectKernelDefaults": True,  # the values kubelet expects are in infra/node/sysctls.py
        # No container runs Unconfined unless it says so: the runtime's default profile (infra/node/seccomp.py).
        "seccompDefault": True,
        "cgroupDriver": "systemd",  # matches containerd's SystemdCgroup = true
        "containerRuntimeEndpoint": f"unix://{containerd.SOCKET}",
        "clusterDNS": [cluster_dns],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": RESOLV_CONF,
        # One pod per secondary IP configuration of the NIC: never more pods than pod addresses.
        "maxPods": max_pods,
        # The 2,500-node post: one 17 GB image pull must not block every other pull.
        "serializeImagePulls": False,
        "maxParallelImagePulls": MAX_PARALLEL_IMAGE_PULLS,
        "registerWithTaints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in taints],
    }


def render_config(**kwargs: Any) -> str:
    return yaml_text.dump(config(**kwargs), sort_keys=False)


def kubeconfig(server: str, user: str, credentials: Mapping[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "supercluster", "cluster": {"server": server, "certificate-authority": CA_PATH}}],
        "users": [{"name": user, "user": dict(credentials)}],
        "contexts": [{"name": user, "context": {"cluster": "supercluster", "user": user}}],
        "current-context": user,
    }


def bootstrap_kubeconfig(server: str) -> dict[str, Any]:
    """Authenticates with the bootstrap token read from the file Key Vault fills at boot."""
    return kubeconfig(server, "kubelet-bootstrap", {"tokenFile": TOKEN_PATH})


def node_kubeconfig(server: str) -> dict[str, Any]:
    """The node's own identity (system:node:<name>), from the certificate kubelet keeps rotated."""
    return kubeconfig(server, "node", {"client-certificate": CLIENT_CERT, "client-key": CLIENT_CERT})


def unit(labels: Mapping[str, str], gpu: bool) -> str:
    flags = {
        "bootstrap-kubeconfig": BOOTSTRAP_KUBECONFIG,
        "kubeconfig": KUBECONFIG,
        "cert-dir": CERT_DIR,
        "config": CONFIG_PATH,
        "config-dir": DROP_IN_DIR,
        "image-credential-provider-config": CREDENTIAL_PROVIDER_CONFIG,
        "image-credential-provider-bin-dir": CREDENTIAL_PROVIDER_DIR,
    }
    if labels:  # node labels exist only as a flag (KubeletConfiguration has no field for them)
        flags["node-labels"] = ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
    # Hard requirements: without them the node must not register. The secrets and the preload are
    # only ordered before kubelet: kubelet retries until the token file exists, and a failed preload
    # leaves a node that can still pull through containerd.
    requires = [containerd.UNIT, state_disk.UNIT, install.UNIT, cni.UNIT, seccomp.UNIT, JOIN_UNIT]
    requires += [gpu_check.UNIT] if gpu else []
    wanted = [FETCH_UNIT, pinned_images.UNIT, "network-online.target"]
    return systemd.unit(
        "kubelet: the Kubernetes node agent",
        [f"{install.BIN}/kubelet", *systemd.flags(flags)],
        after=requires + wanted,
        requires=requires,
        wants=wanted,
        service={"ExecStartPre": f"{PROVIDER_ID_SCRIPT} {PROVIDER_ID_PATH}", "Restart": "always", "RestartSec": "10"},
    )


def add_kubelet(
    cloud: CloudConfig,
    *,
    server: str,
    cluster_dns: str,
    max_pods: int,
    labels: Mapping[str, str],
    taints: Sequence[Taint],
    gpu: bool,
    registry: str,
) -> None:
    cloud.add(
        CONFIG_PATH, render_config(cluster_dns=cluster_dns, max_pods=max_pods, taints=taints), permissions=PRIVATE
    )
    cloud.add(BOOTSTRAP_KUBECONFIG, yaml_text.dump(bootstrap_kubeconfig(server), sort_keys=False), permissions=PRIVATE)
    # The programs compressed: node customData is near Azure's limit (infra/boot/cloudinit.py).
    cloud.add(PROVIDER_ID_SCRIPT, machine.source("node/provider_id.py"), permissions="0755", compressed=True)
    cloud.add(
        CREDENTIAL_PROVIDER_CONFIG,
        yaml_text.dump(credential_provider_config(registry), sort_keys=False),
        permissions=PRIVATE,
    )
    cloud.add(
        f"{CREDENTIAL_PROVIDER_DIR}/{CREDENTIAL_PROVIDER}",
        machine.source("node/acr-credential-provider.py"),
        permissions="0755",
        compressed=True,
    )
    cloud.add(UNIT_PATH, unit(labels, gpu), permissions=PRIVATE)


def relabelled(cloud: CloudConfig, labels: Mapping[str, str], gpu: bool) -> CloudConfig:
    """``cloud`` for a node that registers with ``labels`` instead: they reach kubelet only through its
    unit's ``--node-labels`` flag (``unit``), so only the unit changes."""
    return cloud.with_content(UNIT_PATH, unit(labels, gpu))
