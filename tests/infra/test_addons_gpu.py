"""GPU plumbing: the device plugin only on GPU nodes, and a health check that owns the start-up taint."""

from __future__ import annotations

import importlib.util
import subprocess

from infra.addons import gpu_health_check
from infra.addons.k8s import pod_templates
from infra.facts.labels import GPU_STARTUP_TAINT_KEY
from tests.helpers import raw_config, require_tool
from tests.infra.addon_fixtures import all_objects, find, groups_for

SCRIPTS = gpu_health_check.SCRIPTS


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_device_plugin_selects_gpu_nodes_only():
    groups = groups_for("prod")
    pod = find(groups, "DaemonSet", "nvidia-device-plugin")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"supercluster.io/role": "gpu"}
    assert "affinity" not in pod
    runtime = find(groups, "RuntimeClass", pod["runtimeClassName"])
    assert runtime["scheduling"]["nodeSelector"] == {"supercluster.io/role": "gpu"}
    # It must run while the node still carries the start-up taint.
    assert {"operator": "Exists"} in pod["tolerations"]


def test_no_gpu_pool_no_runtime_class():
    cpu_only = [pool for pool in raw_config("dev")["nodePools"] if pool["role"] != "gpu"]
    groups = groups_for("dev", nodePools=cpu_only)
    assert not [o for o in all_objects(groups) if o["kind"] == "RuntimeClass"]
    assert not [o for o in groups["gpu_health_check"] if o["kind"] == "DaemonSet"]


def test_one_health_check_per_gpu_pool_expecting_the_pools_gpu_count():
    groups = groups_for("prod")
    daemons = [o for o in groups["gpu_health_check"] if o["kind"] == "DaemonSet"]
    assert [d["metadata"]["name"] for d in daemons] == ["gpu-health-check-h100a", "gpu-health-check-h100b"]
    pod = daemons[0]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"supercluster.io/role": "gpu", "supercluster.io/pool": "h100a"}
    dcgm, tainter = pod["containers"]
    env = {e["name"]: e.get("value") for e in dcgm["env"]}
    assert env["EXPECTED_GPUS"] == "8" and env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert "resources" in dcgm and "nvidia.com/gpu" not in dcgm["resources"]["requests"]
    taint_env = {e["name"]: e.get("value") for e in tainter["env"]}
    assert taint_env["TAINT_KEY"] == GPU_STARTUP_TAINT_KEY == "supercluster.io/gpu-unhealthy"
    # Only the tainter sees a token.
    assert pod["automountServiceAccountToken"] is False
    assert not any(m["name"] == "token" for m in dcgm["volumeMounts"])
    assert any(m["name"] == "token" for m in tainter["volumeMounts"])


def test_admission_policy_confines_the_health_check_to_its_own_node_and_taint():
    policy = find(groups_for("prod"), "ValidatingAdmissionPolicy", "supercluster-gpu-health-check")["spec"]
    assert (
        policy["matchConditions"][0]["expression"]
        == "request.userInfo.username == 'system:serviceaccount:kube-system:gpu-health-check'"
    )
    expressions = " ".join(v["expression"] for v in policy["validations"])
    assert "authentication.kubernetes.io/node-name" in expressions and "object.metadata.name" in expressions
    assert f"t.key != '{GPU_STARTUP_TAINT_KEY}'" in expressions
    binding = find(groups_for("prod"), "ValidatingAdmissionPolicyBinding", "supercluster-gpu-health-check")
    assert binding["spec"]["validationActions"] == ["Deny"]


def test_taint_follows_the_verdict():
    script = _load("node_taint")
    node = {
        "metadata": {"resourceVersion": "42"},
        "spec": {
            "taints": [
                {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                {"key": GPU_STARTUP_TAINT_KEY, "effect": "NoSchedule"},
            ]
        },
    }
    healthy = script.taint_patch(node, GPU_STARTUP_TAINT_KEY, "NoSchedule", healthy=True)
    assert healthy[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "42"}
    assert healthy[1]["value"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert script.taint_patch(node, GPU_STARTUP_TAINT_KEY, "NoSchedule", healthy=False) is None
    untainted = {"metadata": {"resourceVersion": "43"}, "spec": {}}
    assert script.taint_patch(untainted, GPU_STARTUP_TAINT_KEY, "NoSchedule", healthy=True) is None
    retaint = script.taint_patch(untainted, GPU_STARTUP_TAINT_KEY, "NoSchedule", healthy=False)
    assert retaint[1] == {
        "op": "add",
        "path": "/spec/taints",
        "value": [{"key": GPU_STARTUP_TAINT_KEY, "effect": "NoSchedule"}],
    }


def test_verdict_file(tmp_path):
    script = _load("node_taint")
    verdict = tmp_path / "verdict"
    assert script.read_verdict(str(verdict)) is None
    verdict.write_text("healthy\n")
    assert script.read_verdict(str(verdict)) is True
    verdict.write_text("unhealthy: 7 of 8 GPUs visible\n")
    assert script.read_verdict(str(verdict)) is False


def test_gpu_check_script_parses_and_reaches_a_verdict(tmp_path):
    bash = require_tool("bash")
    script = SCRIPTS / "gpu_check.sh"
    assert subprocess.run([bash, "-n", str(script)], capture_output=True).returncode == 0
    # With no GPU (and no nvidia-smi) on this machine, one round must write "unhealthy".
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    for tool in ("nv-hostengine", "nvidia-smi", "dcgmi"):
        (fake_bin / tool).write_text("#!/bin/sh\nexit 1\n")
        (fake_bin / tool).chmod(0o755)
    status = tmp_path / "verdict"
    env = {
        "PATH": f"{fake_bin}:/usr/bin:/bin",
        "EXPECTED_GPUS": "8",
        "INTERVAL_SECONDS": "60",
        "STATUS_FILE": str(status),
    }
    process = subprocess.Popen([bash, str(script)], env=env)
    try:
        for _ in range(100):
            if status.exists():
                break
            subprocess.run(["sleep", "0.05"])
    finally:
        process.kill()
        process.wait()
    assert status.read_text() == "unhealthy: 0 of 8 GPUs visible\n"


def test_gpu_agents_tolerate_the_start_up_taint_and_balloons_do_not():
    groups = groups_for("prod", addons={"balloons": {"headroomNodes": {"h100a": 2}}})
    for workload, pod in pod_templates(all_objects(groups)):
        name = workload["metadata"]["name"]
        tolerates = any(
            t.get("operator") == "Exists" and "key" not in t or t.get("key") == GPU_STARTUP_TAINT_KEY
            for t in pod.get("tolerations", [])
        )
        if name.startswith(("gpu-health-check", "nvidia-device-plugin")):
            assert tolerates, name
        if name.startswith("balloon"):
            assert not tolerates, name


# ------------------------------------------------------------- finding 3: a pod sees only the GPUs it was given


def test_device_plugin_hands_out_gpus_as_volume_mounts():
    pod = find(groups_for("prod"), "DaemonSet", "nvidia-device-plugin")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["DEVICE_LIST_STRATEGY"] == "volume-mounts"


def test_every_add_on_container_that_asks_for_all_gpus_is_privileged():
    """The toolkit ignores NVIDIA_VISIBLE_DEVICES from unprivileged containers: an agent that needs every GPU
    without holding one (the device plugin's image sets it; the health check sets it) must be privileged,
    and only kube-system (exempt from Pod Security) may hold such a pod."""
    checked = 0
    for workload, pod in pod_templates(all_objects(groups_for("prod"))):
        for container in pod["containers"]:
            env = {e["name"]: e.get("value") for e in container.get("env", [])}
            if env.get("NVIDIA_VISIBLE_DEVICES") or workload["metadata"]["name"] == "nvidia-device-plugin":
                checked += 1
                assert container["securityContext"].get("privileged") is True, workload["metadata"]["name"]
                assert workload["metadata"]["namespace"] == "kube-system"
    assert checked == 4  # the device plugin, the two pools' health checks and the DCGM exporter


def _cloud_files(cloud_init: str) -> dict[str, dict]:
    from plan.artifacts import cloud_init_entries

    return cloud_init_entries(cloud_init)


def test_gpu_nodes_toolkit_ignores_the_environment_of_unprivileged_pods():
    import tomllib

    from infra.node import gpu, install
    from tests.infra.addon_fixtures import cluster_for, node_cloud_inits

    cluster = cluster_for("prod")
    spec = cluster.spec
    gpu_pools = {pool.name for pool in spec.config.node_pools if pool.size.gpus}
    seen = set()
    # Keyed by pool or by shard (``<pool>-sNNN``): every cloud-init a node of the pool can receive.
    for key, cloud_init in node_cloud_inits(cluster).items():
        [pool] = [p.name for p in spec.config.node_pools if key == p.name or key.startswith(f"{p.name}-s")]
        files = _cloud_files(cloud_init)
        if pool not in gpu_pools:
            assert gpu.TOOLKIT_CONFIG_PATH not in files, key
            continue
        seen.add(pool)
        entry = files[gpu.TOOLKIT_CONFIG_PATH]
        assert entry.get("permissions") == "0644" and entry.get("owner", "root:root") == "root:root"
        config = tomllib.loads(entry["content"])
        assert config["accept-nvidia-visible-devices-envvar-when-unprivileged"] is False, key
        assert config["accept-nvidia-visible-devices-as-volume-mounts"] is True, key
        assert config["nvidia-container-runtime"]["runtimes"] == [install.RUNC_PATH]
    assert seen == gpu_pools
