"""A tenant's pods against dev's real apiserver, with the rendered admission (Pod Security, the tenant
policies of infra/control_plane/admission.py): no way past the scheduler onto another team's pool, a
system node or a NAT host, and no platform priority. The control plane alone is booted: admission
needs no node.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import yaml

from infra.addons.shared_names import (
    CLUSTER_CRITICAL,
    NODE_CRITICAL,
    SYSTEM_NAMESPACE,
    SYSTEM_PRIORITY,
    WORKLOAD_PRIORITY,
)
from infra.control_plane.admission import TEAM_TAINT_KEY, team_namespace
from infra.facts.labels import GPU_STARTUP_TAINT_KEY, NAT_HOST_TAINT_KEY, SYSTEM_TAINT_KEY
from tests.e2e.cluster import Cluster, boot

pytestmark = pytest.mark.e2e
PAUSE = [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]


@pytest.fixture(scope="module")
def control_plane(binaries: Path, tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    cluster = boot("dev", tmp_path_factory.mktemp("dev-admission"), binaries, with_nodes=False)
    yield cluster
    cluster.close()


def _create(cluster: Cluster, *documents: dict) -> tuple[bool, str]:
    result = cluster.kubectl("create", "-f", "-", input=yaml.safe_dump_all(documents), check=False)
    return result.returncode == 0, result.stderr + result.stdout


def _pod(name: str, namespace: str, **spec) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": PAUSE, **spec},
    }


def _namespace(cluster: Cluster) -> str:
    name = f"tenant-{uuid.uuid4().hex[:6]}"
    assert _create(cluster, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})[0]
    return name


def _toleration(key: str, value: str = "true") -> dict:
    return {"key": key, "operator": "Equal", "value": value, "effect": "NoSchedule"}


def test_a_tenant_pod_cannot_pick_its_node_or_tolerate_its_way_onto_another_pool(control_plane: Cluster):
    """Even as system:masters (the test's own kubectl): the policies bind on the namespace, not the caller."""
    namespace = _namespace(control_plane)
    refused = {
        "node-name": ({"nodeName": "dev-pool-gpu-s000000000"}, "may not name its node"),
        "team": ({"tolerations": [_toleration(TEAM_TAINT_KEY, "vision")]}, f"may tolerate {TEAM_TAINT_KEY}"),
        "everything": ({"tolerations": [{"operator": "Exists"}]}, "may not tolerate every taint"),
        **{
            f"platform-{i}": ({"tolerations": [_toleration(key)]}, "may not tolerate the platform's taints")
            for i, key in enumerate((SYSTEM_TAINT_KEY, NAT_HOST_TAINT_KEY, GPU_STARTUP_TAINT_KEY))
        },
        **{
            f"priority-{i}": ({"priorityClassName": name}, "may not use the platform's priority classes")
            for i, name in enumerate((SYSTEM_PRIORITY, CLUSTER_CRITICAL, NODE_CRITICAL))
        },
    }
    for name, (spec, message) in refused.items():
        ok, output = _create(control_plane, _pod(name, namespace, **spec))
        assert not ok and message in output, (name, output)
    # What tenants do every day still passes: a GPU pool's own taint, the workload priority.
    ordinary = {"tolerations": [_toleration("nvidia.com/gpu", "present")], "priorityClassName": WORKLOAD_PRIORITY}
    ok, output = _create(control_plane, _pod("ordinary", namespace, **ordinary))
    assert ok, output
    # Binding it by hand, by either path, is refused too: only the scheduler binds.
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "ordinary", "namespace": namespace},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "dev-nat-hosts-0"},
    }
    ok, output = _create(control_plane, binding)
    assert not ok and "only the scheduler binds" in output, output
    result = control_plane.kubectl(
        "create", "--raw", f"/api/v1/namespaces/{namespace}/pods/ordinary/binding", "-f", "-",
        input=json.dumps(binding), check=False,
    )  # fmt: skip
    assert result.returncode != 0 and "only the scheduler binds" in result.stderr, result.stderr
    # A team namespace may tolerate its own team's taint (and PodTolerationRestriction, no other team's).
    team = f"team-vision-{uuid.uuid4().hex[:6]}"
    assert _create(control_plane, team_namespace(team, "vision"))[0]
    ok, output = _create(control_plane, _pod("job", team, tolerations=[_toleration(TEAM_TAINT_KEY, "vision")]))
    assert ok, output
    # The platform's namespace is not a tenant's: its agents keep naming nodes and tolerating everything.
    name = f"agent-{uuid.uuid4().hex[:6]}"
    agent = _pod(name, SYSTEM_NAMESPACE, nodeName="dev-nat-hosts-0", tolerations=[{"operator": "Exists"}])
    ok, output = _create(control_plane, {**agent, "spec": {**agent["spec"], "priorityClassName": NODE_CRITICAL}})
    assert ok, output
    for ns in (namespace, team):
        control_plane.kubectl("delete", "namespace", ns, "--wait=false")
    control_plane.kubectl("delete", "pod", name, "-n", SYSTEM_NAMESPACE, "--wait=false")
