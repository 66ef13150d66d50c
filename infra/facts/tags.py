"""Azure tag names the scale sets and VMs carry, and what the cluster autoscaler looks them up by."""

from __future__ import annotations

# cluster-autoscaler's Azure auto-discovery and scale-from-zero tags (kubernetes/autoscaler
# cluster-autoscaler/cloudprovider/azure: README "Auto-discovery setup", azure_template.go).
AUTOSCALER_ENABLED = "cluster-autoscaler-enabled"
AUTOSCALER_NAME = "cluster-autoscaler-name"
AUTOSCALER_MIN = "min"  # the scale set's node-count bounds the autoscaler keeps it within
AUTOSCALER_MAX = "max"
LABEL_PREFIX = "k8s.io_cluster-autoscaler_node-template_label_"
TAINT_PREFIX = "k8s.io_cluster-autoscaler_node-template_taint_"
RESOURCES_PREFIX = "k8s.io_cluster-autoscaler_node-template_resources_"
# The fingerprint of a scale set's or VM's cloud-init: a changed model shows in the preview.
CLOUD_INIT = "supercluster.io_cloud-init"


def autoscaler_discovery(cluster_name: str) -> dict[str, str]:
    """The tags every node scale set carries and the autoscaler's ``--node-group-auto-discovery`` names."""
    return {AUTOSCALER_ENABLED: "true", AUTOSCALER_NAME: cluster_name}


def discovery_flag_value(cluster_name: str) -> str:
    """``--node-group-auto-discovery``'s value: scale sets carrying every discovery tag."""
    return "label:" + ",".join(f"{key}={value}" for key, value in autoscaler_discovery(cluster_name).items())


# The machine role of a dedicated VM (``roles.Role.machine``): the plan diff and the policy pack count
# the machines of one role a deploy takes down.
MACHINE_ROLE = "supercluster.io_role"
