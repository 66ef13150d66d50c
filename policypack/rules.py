"""State-safety rules that every real ``pulumi preview`` and ``pulumi up`` checks (``--policy-pack policypack``).

The rules read what the engine hands a policy: each resource's inputs (``props``, camelCase as in the
provider schema) and options. ``policypack/__main__.py`` wraps them in a ``PolicyPack``; the tests call the
same policy objects' ``validate`` on the offline plan's resources (``tests/policy/test_policy_pack.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from infra.day2.deploy_rules import APISERVER_ROLE, CUSTOM_DATA_PATH, ETCD_ROLES, MACHINE_ROLE_TAG, NAT_HOST_ROLE

PACK_NAME = "supercluster-state-safety"
VM = "azure-native:compute:VirtualMachine"
SCALE_SET = "azure-native:compute:VirtualMachineScaleSet"
NIC = "azure-native:network:NetworkInterface"


def _role(props: Mapping[str, Any]) -> str | None:
    tags = props.get("tags")
    return tags.get(MACHINE_ROLE_TAG) if isinstance(tags, Mapping) else None


def _etcd_machine(props: Mapping[str, Any]) -> bool:
    return _role(props) in ETCD_ROLES


# Resources whose loss loses data or strands the cluster: deleting or replacing one needs a deliberate
# `pulumi state unprotect` (docs/security.md, "What is protected, and why").
PROTECTED: dict[str, Callable[[Mapping[str, Any]], bool]] = {
    "azure-native:resources:ResourceGroup": lambda props: True,
    "azure-native:network:VirtualNetwork": lambda props: True,
    "azure-native:network:VirtualNetworkPeering": lambda props: True,
    "azure-native:network:PublicIPPrefix": lambda props: True,  # egress addresses others allow-list
    "azure-native:keyvault:Vault": lambda props: True,
    "azure-native:storage:StorageAccount": lambda props: True,
    "azure-native:storage:BlobContainer": lambda props: True,
    "azure-native:containerregistry:Registry": lambda props: True,
    SCALE_SET: lambda props: True,  # running jobs
    VM: _etcd_machine,  # an etcd member's data is on its local NVMe
    NIC: _etcd_machine,  # an etcd member's address is in every peer's config
}


def _protected(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    wants = PROTECTED.get(args.resource_type)
    if wants is not None and wants(args.props) and not args.opts.protect:
        report_violation(f"{args.name} ({args.resource_type}) holds state and must be protected")


def _capacity_never_ignored(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """With ``ignoreChanges`` on the capacity, Pulumi sends the value stored at creation with every model update
    and Azure scales the pool back to it (docs/day2.md, "Scale-set capacity")."""
    if args.resource_type != SCALE_SET:
        return
    ignored = [p for p in args.opts.ignore_changes or [] if p in ("sku", "sku.capacity", "sku.*")]
    if ignored:
        report_violation(
            f"{args.name} ignores {ignored[0]}: Pulumi would send the capacity stored at creation with "
            f"the next model update; send sku.capacity only when the scale set is created"
        )


def _no_public_ips(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """No machine and no load balancer is reachable from the internet. The one public address range the
    design has is each VNet's NAT gateway egress prefix (outbound only, what other parties allow-list)."""
    props, typ = args.props, args.resource_type
    if typ == "azure-native:network:PublicIPAddress":
        report_violation(f"{args.name}: a public IP address (only NAT gateway egress prefixes are allowed)")
    elif typ == NIC and any(
        c.get("publicIPAddress") for c in props.get("ipConfigurations") or () if isinstance(c, Mapping)
    ):
        report_violation(f"{args.name}: a NIC with a public IP")
    elif typ == SCALE_SET:
        profile = (props.get("virtualMachineProfile") or {}).get("networkProfile") or {}
        ip_configurations = [
            c
            for nic in profile.get("networkInterfaceConfigurations") or ()
            for c in (nic.get("ipConfigurations") or () if isinstance(nic, Mapping) else ())
        ]
        if any(isinstance(c, Mapping) and c.get("publicIPAddressConfiguration") for c in ip_configurations):
            report_violation(f"{args.name}: scale set instances with public IPs")
    elif typ == "azure-native:network:LoadBalancer":
        for frontend in props.get("frontendIPConfigurations") or ():
            if isinstance(frontend, Mapping) and (frontend.get("publicIPAddress") or frontend.get("publicIPPrefix")):
                report_violation(f"{args.name}: a public load balancer frontend (every frontend is internal)")


def _one_machine_per_role(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    """No deploy takes more than one apiserver or NAT host down: at most one machine of a role takes a new
    cloud-init (the one being rolled, docs/day2.md), and etcd members never take one from a deploy."""
    taking: dict[str, list[str]] = {}
    for resource in args.resources:
        if resource.resource_type != VM:
            continue
        role = _role(resource.props)
        ignores = CUSTOM_DATA_PATH in (resource.opts.ignore_changes or [])
        if role in ETCD_ROLES and not ignores:
            report_violation(
                f"{resource.name}: an etcd member must ignore {CUSTOM_DATA_PATH} (rolled by the "
                f"runbook, never by a deploy)",
                resource.urn,
            )
        elif role in (APISERVER_ROLE, NAT_HOST_ROLE) and not ignores:
            taking.setdefault(role, []).append(resource.name)
    for resource in args.resources:
        if resource.resource_type == SCALE_SET and _role(resource.props) == APISERVER_ROLE:
            problem = _more_than_one_per_batch(resource.props)
            if problem:
                report_violation(f"{resource.name}: {problem}", resource.urn)
    for role, names in taking.items():
        if len(names) > 1:
            report_violation(
                f"{len(names)} {role} machines would take a new cloud-init in one deploy "
                f"({', '.join(sorted(names))}): roll one per deploy"
            )


def _more_than_one_per_batch(props: Mapping[str, Any]) -> str | None:
    """The apiserver scale set's rolling policy must take one instance per batch and stop on an unhealthy one
    (infra/control_plane/scale_set.py): a model change reaches every apiserver in the one deploy."""
    policy = props.get("upgradePolicy") or {}
    rolling = policy.get("rollingUpgradePolicy") or {}
    capacity = (props.get("sku") or {}).get("capacity") or 0
    if policy.get("mode") != "Rolling":
        return f"upgradePolicy.mode is {policy.get('mode')!r}: apiservers roll one at a time (Rolling)"
    if capacity > 1 and rolling.get("maxBatchInstancePercent", 20) * capacity > 100:
        return f"maxBatchInstancePercent {rolling.get('maxBatchInstancePercent', 20)} takes more than one of {capacity}"
    if rolling.get("maxUnhealthyUpgradedInstancePercent", 20) != 0:
        return "maxUnhealthyUpgradedInstancePercent must be 0: an unhealthy upgraded apiserver stops the rollout"
    return None


PROTECTED_STATEFUL = ResourceValidationPolicy(
    name="protected-stateful-resources",
    description="Resources that hold state are protected.",
    validate=_protected,
    enforcement_level=EnforcementLevel.MANDATORY,
)
CAPACITY_NEVER_SENT = ResourceValidationPolicy(
    name="scale-set-capacity-never-sent",
    description="Scale sets never ignore sku.capacity (Pulumi would send the creation value back).",
    validate=_capacity_never_ignored,
    enforcement_level=EnforcementLevel.MANDATORY,
)
NO_PUBLIC_IPS = ResourceValidationPolicy(
    name="no-public-ips",
    description="No public IP on a machine or load balancer; NAT gateway egress only.",
    validate=_no_public_ips,
    enforcement_level=EnforcementLevel.MANDATORY,
)
NO_MACHINE_WIDE_RESTARTS = StackValidationPolicy(
    name="no-machine-wide-restarts",
    description="At most one apiserver or NAT host rolled at a time.",
    validate=_one_machine_per_role,
    enforcement_level=EnforcementLevel.MANDATORY,
)

POLICIES = [PROTECTED_STATEFUL, CAPACITY_NEVER_SENT, NO_PUBLIC_IPS, NO_MACHINE_WIDE_RESTARTS]
