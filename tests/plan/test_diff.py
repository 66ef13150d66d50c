"""The plan diff on synthetic plans: small programs under mocks, written as plan directories, compared.

The programs mirror how the real components declare machines (DedicatedVm for etcd, scale
sets for node pools) so each test controls exactly what changes between the two plans."""

from __future__ import annotations

from pathlib import Path

import pulumi
import pytest

from components import declare
from infra.boot import cloudinit
from plan.__main__ import EXIT_CHANGED, EXIT_DANGER, EXIT_OK, exit_code
from plan.artifacts import cloud_init_entries, file_content, plan_files, write_plan
from plan.diff import Plan, changed_paths, diff_plans, load_plan
from plan.diff_report import render_diff
from plan.replacements import covers, replacements
from plan.runner import run_declarations

SYSCTL = "/etc/sysctl.d/90-supercluster.conf"


def machine_cloud_init(gc_thresh3: int) -> str:
    config = cloudinit.CloudConfig()
    config.add(SYSCTL, f"net.ipv4.neigh.default.gc_thresh3 = {gc_thresh3}\n")
    config.add("/etc/hostname-role", "node\n")
    return cloudinit.render(config)


def cluster(
    *,
    node_gc_thresh3=100_000,
    etcd_text="etcd v1\n",
    etcd_zone="1",
    etcd_ignores_custom_data=True,
    vnet_name="dev-system",
    vnet_aliases=(),
    vnet_protected=True,
    pool_shards=2,
):
    """A small cluster in the shape of the real one: a protected VNet, an etcd VM, a pool of scale sets."""

    def program():
        vnet = declare.azure(
            "network:VirtualNetwork",
            vnet_name,
            {"virtualNetworkName": "dev-system-vnet", "resourceGroupName": "dev-rg"},
            pulumi.ResourceOptions(protect=vnet_protected, aliases=[pulumi.Alias(name=a) for a in vnet_aliases]),
            outputs=["name"],
        )
        subnet = declare.azure(
            "network:Subnet",
            "dev-etcd",
            {
                "subnetName": "etcd",
                "virtualNetworkName": vnet.output("name"),
                "resourceGroupName": "dev-rg",
                "addressPrefix": "10.64.0.0/27",
            },
        )
        etcd_cloud_init = cloudinit.render(_single_file("/etc/etcd/etcd.yaml", etcd_text))
        # The shape components.machines.DedicatedVm gives an etcd member.
        declare.azure(
            "compute:VirtualMachine",
            "dev-etcd-0-vm",
            {
                "vmName": "dev-etcd-0",
                "resourceGroupName": "dev-rg",
                "location": "eastus",
                "zones": [etcd_zone],
                "hardwareProfile": {"vmSize": "Standard_L8s_v3"},
                "networkProfile": {"networkInterfaces": [{"id": subnet.id}]},
                "osProfile": {
                    "computerName": "dev-etcd-0",
                    "adminUsername": "azureuser",
                    "customData": cloudinit.custom_data(etcd_cloud_init, "etcd"),
                },
                "tags": {"supercluster.io/cloud-init": cloudinit.fingerprint(etcd_cloud_init)},
            },
            pulumi.ResourceOptions(
                protect=True, ignore_changes=["osProfile.customData"] if etcd_ignores_custom_data else None
            ),
        )
        node_cloud_init = machine_cloud_init(node_gc_thresh3)
        for i in range(pool_shards):
            declare.azure(
                "compute:VirtualMachineScaleSet",
                f"dev-gpu-s{i:03d}",
                {
                    "vmScaleSetName": f"dev-gpu-s{i:03d}",
                    "resourceGroupName": "dev-rg",
                    "sku": {"name": "Standard_ND96isr_H100_v5"},  # a live scale set: no capacity sent
                    "virtualMachineProfile": {
                        "osProfile": {
                            "computerNamePrefix": f"gpu{i:03d}",
                            "customData": cloudinit.custom_data(node_cloud_init, "gpu"),
                        }
                    },
                },
            )

    return program


def _single_file(path: str, content: str) -> cloudinit.CloudConfig:
    config = cloudinit.CloudConfig()
    config.add(path, content)
    return config


def plan_dir(directory: Path, program) -> Path:
    run = run_declarations(program, stack="dev")
    write_plan(directory, plan_files(run.registrations, run.outputs, "summary\n"))
    return directory


def compare(tmp_path: Path, before, after):
    old = load_plan(plan_dir(tmp_path / "old", before))
    new = load_plan(plan_dir(tmp_path / "new", after))
    return diff_plans(old, new)


def names(changes) -> list[str]:
    return sorted(change.name for change in changes)


# --------------------------------------------------------------------------- what changed, exactly


def test_identical_plans_have_no_changes(tmp_path):
    diff = compare(tmp_path, cluster(), cluster())
    assert not diff.changed and exit_code(diff) == EXIT_OK
    assert "No changes" in render_diff("dev", "old", diff)


def test_editing_a_sysctl_names_exactly_the_scale_sets_and_files(tmp_path):
    diff = compare(tmp_path, cluster(), cluster(node_gc_thresh3=120_000))
    assert [(c.action, c.name, c.changed) for c in diff.resources] == [
        ("update", "dev-gpu-s000", ("virtualMachineProfile.osProfile.customData",)),
        ("update", "dev-gpu-s001", ("virtualMachineProfile.osProfile.customData",)),
    ]
    assert sorted(diff.files_changed) == [
        "dev-gpu-s000/cloud-init.yaml",
        f"dev-gpu-s000{SYSCTL}",
        "dev-gpu-s001/cloud-init.yaml",
        f"dev-gpu-s001{SYSCTL}",
    ]
    assert not diff.files_added and not diff.files_removed and not diff.dangers
    assert exit_code(diff) == EXIT_CHANGED
    sysctl_diff = diff.files_changed[f"dev-gpu-s000{SYSCTL}"]
    assert "-net.ipv4.neigh.default.gc_thresh3 = 100000" in sysctl_diff
    assert "+net.ipv4.neigh.default.gc_thresh3 = 120000" in sysctl_diff
    report = render_diff("dev", "old", diff)
    # The same change on every shard is shown once, naming every file it applies to.
    assert report.count("gc_thresh3 = 120000") == 2  # once for the sysctl files, once for the cloud-init.yaml
    assert f"#### changed: `files/dev-gpu-s000{SYSCTL}` and 1 more with the same change" in report
    assert f"- `files/dev-gpu-s001{SYSCTL}`" in report
    assert "Note (2 of the resources above): a scale set model change reaches new instances only" in report


def test_growing_a_pool_names_exactly_the_new_scale_set(tmp_path):
    diff = compare(tmp_path, cluster(pool_shards=2), cluster(pool_shards=3))
    assert [(c.action, c.name) for c in diff.resources] == [("create", "dev-gpu-s002")]
    assert diff.files_added == [
        "dev-gpu-s002/cloud-init.yaml",
        "dev-gpu-s002/etc/hostname-role",
        f"dev-gpu-s002{SYSCTL}",
    ]
    assert not diff.files_changed and not diff.files_removed
    report = render_diff("dev", "old", diff)
    assert "| + create | `dev-gpu-s002` |" in report and "1 to create, 0 to update" in report


def test_autoscaler_owned_capacity_is_never_sent_to_a_live_scale_set(tmp_path):
    """A stack deployed when scale sets ignored ``sku.capacity`` (and so sent the creation value with every
    update): the next deploy drops the capacity from the model, an update that carries none, no danger."""
    diff = compare(tmp_path, cluster(), cluster())
    assert not diff.changed
    old = load_plan(tmp_path / "old")
    for resource in old.resources.values():
        if resource["name"] == "dev-gpu-s000":
            resource["inputs"]["sku"]["capacity"] = 40
            resource["options"]["ignoreChanges"] = ["sku.capacity"]
    change = diff_plans(old, load_plan(tmp_path / "new")).resources[0]
    assert (change.action, change.changed, change.ignored, change.danger) == (
        "update",
        ("sku.capacity", "options.ignoreChanges[0]"),
        (),
        None,
    )


def test_a_compressed_programs_change_shows_as_its_decoded_lines_not_as_base64():
    """A program written compressed (``gz+b64``) is one line of base64 in cloud-init.yaml: the diff shows that
    line as a pointer to the decoded copy beside it (with the base64's digest, so the line still changes),
    and the decoded copy's diff shows the program's changed lines."""

    def machine(program: str) -> Plan:
        config = cloudinit.CloudConfig()
        config.add("/usr/local/sbin/program", program, permissions="0755", compressed=True)
        config.add("/etc/role", "node\n")
        text = cloudinit.render(config)
        written = {f"dev-vm{path}": file_content(entry) for path, entry in cloud_init_entries(text).items()}
        return Plan({}, {}, {"dev-vm/cloud-init.yaml": text, **written})

    before = "#!/bin/sh\n" + "echo old\n" * 200
    diff = diff_plans(machine(before), machine(before.replace("echo old\n", "echo new\n", 1)))
    assert sorted(diff.files_changed) == ["dev-vm/cloud-init.yaml", "dev-vm/usr/local/sbin/program"]
    cloud_init = diff.files_changed["dev-vm/cloud-init.yaml"]
    assert "H4sI" not in cloud_init, "no gzip's base64 in the diff"
    pointers = [line for line in cloud_init.splitlines() if "decoded in files/dev-vm/usr/local/sbin/program" in line]
    assert [line[0] for line in pointers] == ["-", "+"] and pointers[0][1:] != pointers[1][1:]
    assert "+echo new" in diff.files_changed["dev-vm/usr/local/sbin/program"]


# --------------------------------------------------------------------------- dangerous changes


def test_moving_an_etcd_vm_to_another_zone_is_flagged(tmp_path):
    diff = compare(tmp_path, cluster(), cluster(etcd_zone="2"))
    assert [(c.action, c.name) for c in diff.resources] == [("replace", "dev-etcd-0-vm")]
    change = diff.dangers[0]
    assert change.danger == "replaces a protected resource"
    assert change.replacements[0].path == "zones[0]"
    assert exit_code(diff) == EXIT_DANGER
    report = render_diff("dev", "old", diff)
    assert report.index("> [!CAUTION]") < report.index("### Resources")
    assert "`dev-etcd-0-vm` (`azure-native:compute:VirtualMachine`): replaces a protected resource" in report


def test_etcd_cloud_init_change_is_ignored_not_replaced_but_its_files_show(tmp_path):
    diff = compare(tmp_path, cluster(), cluster(etcd_text="etcd v2\n"))
    [change] = diff.resources
    assert (change.name, change.action) == ("dev-etcd-0-vm", "update")
    assert change.ignored == ("osProfile.customData",)
    assert change.changed == ('tags["supercluster.io/cloud-init"]',)
    assert not diff.dangers and exit_code(diff) == EXIT_CHANGED
    assert sorted(diff.files_changed) == ["dev-etcd-0-vm/cloud-init.yaml", "dev-etcd-0-vm/etc/etcd/etcd.yaml"]
    assert "ignored (`ignoreChanges`, not applied by `pulumi up`): `osProfile.customData`" in render_diff(
        "dev", "old", diff
    )


def test_etcd_cloud_init_change_without_ignore_changes_is_flagged(tmp_path):
    before = cluster(etcd_ignores_custom_data=False)
    diff = compare(tmp_path, before, cluster(etcd_text="etcd v2\n", etcd_ignores_custom_data=False))
    [change] = diff.dangers
    assert change.name == "dev-etcd-0-vm" and change.action == "replace"
    assert change.replacements[0].path == "osProfile.customData"
    assert "cannot be updated after the VM is created" in change.replacements[0].reason


def test_renaming_a_protected_resource_without_an_alias_is_flagged(tmp_path):
    diff = compare(tmp_path, cluster(), cluster(vnet_name="dev-system-renamed"))
    vnet = next(c for c in diff.resources if c.type == "azure-native:network:VirtualNetwork")
    assert vnet.action == "replace" and vnet.danger == "replaces a protected resource"
    assert vnet.previous_urn.endswith("::dev-system")
    assert vnet.replacements[-1].path == "urn"


def test_renaming_with_an_alias_is_the_same_resource(tmp_path):
    diff = compare(tmp_path, cluster(), cluster(vnet_name="dev-system-renamed", vnet_aliases=("dev-system",)))
    vnet = next(c for c in diff.resources if c.type == "azure-native:network:VirtualNetwork")
    assert (vnet.action, vnet.aliased, vnet.danger, vnet.changed) == ("update", True, None, ())
    assert not diff.of("delete") and not diff.of("create")


def test_deleting_or_unprotecting_a_protected_resource_is_flagged(tmp_path):
    diff = compare(tmp_path, cluster(), cluster(vnet_protected=False))
    assert [(c.name, c.changed, c.danger) for c in diff.dangers] == [
        ("dev-system", ("options.protect",), "removes protection: the next change may delete it")
    ]
    old = load_plan(tmp_path / "old")
    new = load_plan(tmp_path / "old")
    gone = {urn: r for urn, r in new.resources.items() if r["name"] != "dev-etcd-0-vm"}
    diff = diff_plans(old, type(new)(gone, new.outputs, new.files))
    assert [(c.action, c.name, c.danger) for c in diff.dangers] == [
        (
            "delete",
            "dev-etcd-0-vm",
            "deletes a protected resource: pulumi up stops here until it is unprotected on purpose",
        )
    ]


# --------------------------------------------------------------------------- building blocks


def test_changed_paths_use_pulumi_property_path_syntax():
    old = {"a": {"b": [1, 2], "tags": {"supercluster.io/x": "1"}}, "gone": 1}
    new = {"a": {"b": [1, 3, 4], "tags": {"supercluster.io/x": "2"}}, "added": 2}
    assert changed_paths(old, new) == ["a.b[1]", "a.b[2]", 'a.tags["supercluster.io/x"]', "gone", "added"]


def test_covers_matches_prefixes_and_wildcards():
    assert covers("osProfile.customData", "osProfile.customData")
    assert covers("zones", "zones[0]")
    assert covers("ipConfigurations[*].subnet", "ipConfigurations[3].subnet.id")
    assert covers('tags["supercluster.io/cloud-init"]', 'tags["supercluster.io/cloud-init"]')
    assert not covers("osProfile.customData", "osProfile.computerName")
    assert not covers("zones[0]", "zones")


@pytest.mark.parametrize(
    "typ,path,replaced",
    [
        ("azure-native:network:Subnet", "addressPrefix", True),
        ("azure-native:network:Subnet", "subnetName", True),
        ("azure-native:network:VirtualNetwork", "location", True),
        ("azure-native:network:VirtualNetwork", "addressSpace.addressPrefixes[1]", False),
        ("azure-native:network:VirtualNetwork", "subnets[3].addressPrefix", True),
        ("azure-native:network:VirtualNetwork", "subnets[3].name", True),
        ("azure-native:network:VirtualNetwork", "subnets[30]", False),  # a pool grew: one more shard subnet
        ("azure-native:compute:VirtualMachine", "hardwareProfile.vmSize", False),
        ("azure-native:compute:VirtualMachineScaleSet", "virtualMachineProfile.osProfile.customData", False),
        ("azure-native:compute:VirtualMachineScaleSet", "singlePlacementGroup", True),
        ("azure-native:authorization:RoleAssignment", "principalId", True),
        ("tls:index/privateKey:PrivateKey", "rsaBits", True),
        ("kubernetes:apps/v1:DaemonSet", "spec.selector.matchLabels.app", True),
        ("kubernetes:apps/v1:DaemonSet", "spec.template.spec.containers[0].image", False),
        ("kubernetes:core/v1:ConfigMap", "metadata.name", True),
    ],
)
def test_replacement_table(typ, path, replaced):
    assert bool(replacements(typ, [path], [])) is replaced


def test_replace_on_changes_forces_replacement():
    [found] = replacements(
        "azure-native:network:NetworkInterface", ["ipConfigurations[0].name"], ["ipConfigurations[*].name"]
    )
    assert "replaceOnChanges" in found.reason


def test_a_program_that_never_finishes_is_stopped_with_one_line(monkeypatch):
    """Every wait is bounded: a run whose program does not return is given up after the bound."""
    import gc
    import threading
    import time

    import plan.runner

    monkeypatch.setattr(plan.runner, "PROGRAM_TIMEOUT_SECONDS", 0.2)
    release = threading.Event()
    with pytest.raises(plan.runner.ProgramHung, match="did not finish within 0.2 s"):
        plan.runner.run_declarations(lambda: release.wait(10))
    # The abandoned run still holds the cyclic collector paused (plan.runner._cyclic_gc_paused): let it end
    # before the next test in this worker runs a program, or that test finds the collector off.
    release.set()
    deadline = time.monotonic() + 10
    while not gc.isenabled() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert gc.isenabled(), "the abandoned run never put the collector back"


def test_deleting_a_private_key_says_what_it_costs_in_one_sentence():
    key = {"urn": "urn:pulumi:dev::supercluster::tls:index/privateKey:PrivateKey::dev-k", "name": "dev-k"}
    resources = {key["urn"]: {**key, "type": "tls:index/privateKey:PrivateKey", "inputs": {}, "options": {}}}
    before = Plan(resources, {}, {})
    diff = diff_plans(before, Plan({}, {}, {}))
    assert [(c.action, c.name, c.danger) for c in diff.dangers] == [
        ("delete", "dev-k", "deletes a private key: a new key re-issues everything it signed")
    ]
