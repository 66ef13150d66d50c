"""In the rendered plans: every machine boots the exact gallery image version of its kind, which the
program's own Image Builder template builds from a pinned base into the cluster's gallery."""

from __future__ import annotations

import base64

import pytest

from infra.assembly import machine_image
from tests.helpers import parsed

VM = "azure-native:compute:VirtualMachine"
VMSS = "azure-native:compute:VirtualMachineScaleSet"
TEMPLATE = "azure-native:virtualmachineimages:VirtualMachineImageTemplate"
GALLERY_IMAGE = "azure-native:compute:GalleryImage"


@pytest.fixture(params=["dev", "prod"])
def run(request):
    return request.getfixturevalue(f"{request.param}_plan")


def image_of(machine) -> str:
    profile = machine.inputs["virtualMachineProfile"] if machine.type == VMSS else machine.inputs
    return profile["storageProfile"]["imageReference"]["id"]


def test_every_machine_boots_the_exact_version_of_its_kind(run):
    config = parsed(run.stack)
    version = config.machine_image_version
    definitions = {r.inputs["galleryImageName"]: r for r in run.of_type(GALLERY_IMAGE)}
    gpu_pools = {f"{run.stack}-pool-{p.name}" for p in config.node_pools if machine_image.kind_of_pool(p) == "gpu"}
    machines = run.of_type(VM) + run.of_type(VMSS)
    assert len(machines) >= 6
    for machine in machines:
        kind = "gpu" if machine.parent.rsplit("::", 1)[1] in gpu_pools else "cpu"
        definition = definitions[f"{config.cluster_name}-{kind}"]
        assert image_of(machine) == f"{definition.id}/versions/{version}", machine.name
    vms = run.of_type(VM)
    assert all("storageProfile.imageReference" in vm.options["ignoreChanges"] for vm in vms)


def test_each_template_builds_that_version_from_a_pinned_base_into_the_gallery(run):
    config = parsed(run.stack)
    templates = {r.inputs["imageTemplateName"]: r for r in run.of_type(TEMPLATE)}
    definitions = {r.inputs["galleryImageName"]: r for r in run.of_type(GALLERY_IMAGE)}
    assert len(templates) == len(machine_image.kinds_in_use(config)) == 2
    for kind in machine_image.kinds_in_use(config):
        template = templates[f"{config.cluster_name}-{kind}-{config.machine_image_version}"]
        source = template.inputs["source"]
        assert source == {"type": "PlatformImage", **machine_image.BASE_IMAGES[kind]}
        [distribute] = template.inputs["distribute"]
        assert distribute["galleryImageId"] == (
            f"{definitions[f'{config.cluster_name}-{kind}'].id}/versions/{config.machine_image_version}"
        )
        assert distribute["targetRegions"][0]["replicaCount"] == machine_image.REPLICAS
        assert template.inputs["autoRun"] == {"state": "Enabled"}
        [step] = template.inputs["customize"]
        encoded = step["inline"][0].split()[1]
        assert base64.b64decode(encoded).decode() == machine_image.customizer_script(config, kind)
        assert template.options["replaceOnChanges"] == ["*"]
    for definition in definitions.values():
        assert definition.options["protect"] and definition.inputs["hyperVGeneration"] == "V2"


def test_the_plan_files_show_what_each_image_build_runs(run):
    from plan.artifacts import collect_files

    config = parsed(run.stack)
    files = collect_files(run.registrations)
    for kind in machine_image.kinds_in_use(config):
        shown = files[f"{run.stack}-images-{kind}-template/supercluster-{kind}.sh"]
        assert shown == machine_image.customizer_script(config, kind)


@pytest.mark.slow  # a sequence of whole-program runs (seconds)
def test_the_next_deploy_refuses_other_contents_under_a_built_version(dev_plan, tmp_path, capsys):
    """Azure cannot overwrite an image version: a new kubernetesVersion under the same machineImageVersion is
    refused before anything is declared (the last deploy's machineImages output); with a new version it passes."""
    from plan.__main__ import EXIT_BAD_INPUT, main
    from plan.artifacts import plan_files, write_plan

    assert dev_plan.outputs[machine_image.OUTPUT_NAME] == machine_image.built(parsed("dev"))
    old = tmp_path / "old"
    write_plan(old, plan_files(dev_plan.registrations, dev_plan.outputs, ""))
    refused = tmp_path / "refused"
    assert (
        main(["--stack", "dev", "--out", str(refused), "--diff", str(old), "--config", "kubernetesVersion=1.33.5"])
        == EXIT_BAD_INPUT
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: invalid config supercluster:machineImageVersion = '1.0.0'")
    assert "cpu and gpu image carries changed" in err and not refused.exists()
    bumped = tmp_path / "bumped"
    assert (
        main(
            [
                "--stack",
                "dev",
                "--out",
                str(bumped),
                "--diff",
                str(old),
                "--config",
                "kubernetesVersion=1.33.5",
                "--config",
                'machineImageVersion="1.1.0"',
            ]
        )
        != EXIT_BAD_INPUT
    )
    assert bumped.exists()
