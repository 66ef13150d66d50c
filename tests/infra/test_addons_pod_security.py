"""Pod Security for the add-ons: each add-on namespace states its level and its pods pass it; only
kube-system (exempt, the node agents) holds pods that touch the host.

The checks below are the Pod Security Standards' fields for the two levels the add-on
namespaces use (kubernetes.io/docs/concepts/security/pod-security-standards); the real
apiserver applies them in the cluster in a box (tests/e2e/test_dev_cluster.py, every add-on
workload bound).
"""

from __future__ import annotations

import pytest

from infra.addons.k8s import POD_SECURITY_ENFORCE_LABEL, pod_templates
from infra.addons.monitoring import NAMESPACE as MONITORING_NAMESPACE
from infra.addons.shared_names import SYSTEM_NAMESPACE
from infra.control_plane.admission import EXEMPT_NAMESPACES, admission_configuration
from tests.helpers import load_yaml, parsed
from tests.infra.addon_fixtures import all_objects, groups_for

# Pod Security Standards, baseline "Capabilities": what a container may add beyond the runtime's default.
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}
# Pod Security Standards, restricted "Volume Types".
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def _baseline_violations(pod: dict) -> list[str]:
    found = [f for f in ("hostNetwork", "hostPID", "hostIPC") if pod.get(f)]
    found += [f"hostPath {v['name']}" for v in pod.get("volumes", []) if "hostPath" in v]
    for c in pod["containers"] + pod.get("initContainers", []):
        context = c.get("securityContext", {})
        if context.get("privileged"):
            found.append(f"{c['name']} privileged")
        extra = set(context.get("capabilities", {}).get("add", [])) - BASELINE_CAPABILITIES
        found += [f"{c['name']} adds {cap}" for cap in sorted(extra)]
        found += [f"{c['name']} hostPort" for p in c.get("ports", []) if p.get("hostPort")]
    return found


def _restricted_violations(pod: dict) -> list[str]:
    found = _baseline_violations(pod)
    found += [f"volume {v['name']}" for v in pod.get("volumes", []) if not set(v) - {"name"} <= RESTRICTED_VOLUMES]
    pod_context = pod.get("securityContext", {})
    for c in pod["containers"] + pod.get("initContainers", []):
        context = {**pod_context, **c.get("securityContext", {})}
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{c['name']} may escalate")
        if context.get("runAsNonRoot") is not True or context.get("runAsUser") == 0:
            found.append(f"{c['name']} may run as root")
        if context.get("seccompProfile", {}).get("type") not in ("RuntimeDefault", "Localhost"):
            found.append(f"{c['name']} without a seccomp profile")
        capabilities = context.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []) or set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            found.append(f"{c['name']} keeps capabilities")
    return found


CHECKS = {"baseline": _baseline_violations, "restricted": _restricted_violations}
# The one add-on namespace above baseline: Prometheus keeps its TSDB on the node's local NVMe (hostPath).
# Its pods may touch the host through hostPath volumes and nothing else.
PRIVILEGED_NAMESPACES = {MONITORING_NAMESPACE: "privileged"}


def _beyond_hostpath(pod: dict) -> list[str]:
    return [v for v in _baseline_violations(pod) if not v.startswith("hostPath ")]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_add_on_namespace_states_its_level_and_its_pods_pass_it(stack):
    objects = all_objects(groups_for(stack))
    levels = {
        o["metadata"]["name"]: o["metadata"]["labels"].get(POD_SECURITY_ENFORCE_LABEL)
        for o in objects
        if o["kind"] == "Namespace"
    }
    privileged = {name: level for name, level in levels.items() if level not in CHECKS}
    assert privileged == PRIVILEGED_NAMESPACES, levels
    for workload, pod in pod_templates(objects):
        namespace = workload["metadata"]["namespace"]
        if namespace == SYSTEM_NAMESPACE:
            continue
        if namespace in PRIVILEGED_NAMESPACES:
            assert not _beyond_hostpath(pod), (workload["metadata"]["name"], _beyond_hostpath(pod))
            continue
        assert namespace in levels, f"{workload['metadata']['name']} runs in {namespace}, which no add-on labels"
        assert not CHECKS[levels[namespace]](pod), (workload["metadata"]["name"], CHECKS[levels[namespace]](pod))


def test_the_restricted_check_refuses_what_restricted_refuses():
    """The checks above can fail: a locked-down pod passes, each loosening is caught."""
    ok = {
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "c",
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "runAsNonRoot": True,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
    }
    assert not _restricted_violations(ok)
    assert _restricted_violations({**ok, "securityContext": {}})  # no seccomp profile
    assert _restricted_violations({**ok, "hostNetwork": True})
    assert _restricted_violations({**ok, "volumes": [{"name": "h", "hostPath": {"path": "/"}}]})
    loose = {
        **ok["containers"][0],
        "securityContext": {
            **ok["containers"][0]["securityContext"],
            "capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN"]},
        },
    }
    assert _restricted_violations({**ok, "containers": [loose]})


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_only_kube_system_holds_pods_that_touch_the_host_and_only_it_is_exempt(stack):
    """The agents that sign in as the node's identity (the cluster autoscaler) or read the host's tables run
    on the host network in kube-system; a tenant namespace can hold no such pod (baseline, enforced)."""
    host = {}
    for workload, pod in pod_templates(all_objects(groups_for(stack))):
        namespace = workload["metadata"]["namespace"]
        if _baseline_violations(pod) if namespace not in PRIVILEGED_NAMESPACES else _beyond_hostpath(pod):
            host[workload["metadata"]["name"]] = namespace
    assert host and set(host.values()) == {SYSTEM_NAMESPACE}, host
    assert "cluster-autoscaler" in host  # its token comes from IMDS as the node, over the host network
    config = load_yaml(admission_configuration(parsed(stack)))
    [pod_security] = [p for p in config["plugins"] if p["name"] == "PodSecurity"]
    assert pod_security["configuration"]["exemptions"]["namespaces"] == list(EXEMPT_NAMESPACES) == [SYSTEM_NAMESPACE]
    assert pod_security["configuration"]["defaults"]["enforce"] == "baseline"
