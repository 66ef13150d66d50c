"""How long a new node takes from scale-out to Ready, step by step, and what the machine image saves.

Each step's seconds carry their source: a documented default, the deploy critical path's planning
estimate (``VM_CREATE_SECONDS``, which plan/critical_path.py reads from here), or ``ESTIMATE`` (our
planning figure, not yet measured on Azure: replace it with a measurement, docs/node-image.md
"Measuring the join time"). The plan summary prints the totals beside the deploy critical path;
docs/node-image.md holds the same table (a test compares them). The whole-cluster check
(infra/cluster/whole_cluster.py) holds the autoscaler's provision timeout against these totals.
"""

from __future__ import annotations

from dataclasses import dataclass

ESTIMATE = "estimate, not yet measured"
# A VM's create time, also the deploy critical path's estimate for it (plan/critical_path.py).
VM_CREATE_SECONDS = 120


@dataclass(frozen=True)
class Step:
    name: str
    seconds: int  # with the machine image
    source: str
    without_image: int | None = None  # the same step when a node downloads at boot (None: unchanged)
    gpu_only: bool = False


STEPS = (
    Step(
        "autoscaler notices the pending pod",
        10,
        "cluster-autoscaler --scan-interval default 10s (cluster-autoscaler FAQ, parameters table)",
    ),
    Step(
        "VM created from the gallery image",
        VM_CREATE_SECONDS,
        "the deploy critical path's VM estimate (plan/critical_path.py)",
    ),
    Step("boot and cloud-init writes the files", 45, ESTIMATE),
    Step("local SSDs formatted and mounted", 10, ESTIMATE),
    # Without the image: kubelet, kube-proxy, containerd, runc and the CNI plugins from dl.k8s.io and
    # GitHub through the VNet's NAT gateway, plus the Debian packages from the Ubuntu archive.
    Step("binaries and packages in place", 1, ESTIMATE, without_image=60),
    # Without the image: pulled through the cluster's registry (pause; images.preload can be many GB).
    Step("pause image and images.preload in containerd", 5, ESTIMATE, without_image=30),
    Step("bootstrap token and CA from Key Vault", 2, ESTIMATE),
    Step("kubelet TLS bootstrap and node registration", 10, ESTIMATE),
    Step("node reports Ready", 10, "kubelet nodeStatusUpdateFrequency default 10s (KubeletConfiguration reference)"),
    Step("GPU health check removes the start-up taint", 120, ESTIMATE, gpu_only=True),
)


def total_seconds(gpu: bool, with_image: bool = True) -> int:
    return sum(
        step.seconds if with_image or step.without_image is None else step.without_image
        for step in STEPS
        if gpu or not step.gpu_only
    )


def summary_lines(gpu_pools: bool) -> list[str]:
    """The plan summary's section: the table, then the totals with and without the image."""
    lines = [
        "## Node join time",
        "",
        "From scale-out to a Ready node (docs/node-image.md; estimates until measured):",
        "",
        "| step | seconds | without the machine image | source |",
        "|---|---:|---:|---|",
    ]
    for step in STEPS:
        if step.gpu_only and not gpu_pools:
            continue
        without = "same" if step.without_image is None else str(step.without_image)
        name = f"{step.name} (GPU pools)" if step.gpu_only else step.name
        lines.append(f"| {name} | {step.seconds} | {without} | {step.source} |")
    cpu, cpu_without = total_seconds(False), total_seconds(False, with_image=False)
    lines += [
        "",
        f"**CPU node: about {cpu // 60} min {cpu % 60:02d} s** "
        f"({cpu_without - cpu} s of downloads avoided by the machine image).",
    ]
    if gpu_pools:
        gpu, gpu_without = total_seconds(True), total_seconds(True, with_image=False)
        lines.append(
            f"**GPU node: about {gpu // 60} min {gpu % 60:02d} s** ({gpu_without - gpu} s of downloads avoided)."
        )
    return lines + [
        "",
        "A new `machineImageVersion` first needs its image build, which Image Builder runs outside "
        "`pulumi up` and which neither estimate counts (docs/node-image.md, rollout runbook).",
        "",
    ]
