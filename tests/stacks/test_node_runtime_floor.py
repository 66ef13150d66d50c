"""No machine in either plan installs, or boots with, a container runtime older than the releases that
fixed the 2025 container-escape advisories (``versions.RUNC_FLOOR`` and ``CONTAINERD_FLOOR`` name them).

Read from what the plans hand Azure: each image build's customizer script (the binaries it downloads,
by checksum) and each machine's cloud-init (the version its boot check demands)."""

from __future__ import annotations

import base64
import json
import re

import pytest

from infra.assembly import machine_image
from infra.catalog import versions
from infra.node import install
from plan.artifacts import cloud_init_files

TEMPLATE = "azure-native:virtualmachineimages:VirtualMachineImageTemplate"
FLOORS = {"runc": versions.RUNC_FLOOR, "containerd": versions.CONTAINERD_FLOOR}
VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


@pytest.fixture(params=["dev", "prod"])
def run(request):
    return request.getfixturevalue(f"{request.param}_plan")


def runtime_versions(manifest: dict) -> dict[str, tuple[int, ...]]:
    """``{artifact: (major, minor, patch)}`` for runc and containerd, from the version each check expects."""
    found = {}
    for artifact in manifest["artifacts"]:
        if artifact["name"] in FLOORS:
            match = VERSION.search(artifact["version_expect"])
            assert match, artifact
            found[artifact["name"]] = tuple(map(int, match.groups()))
    assert set(found) == set(FLOORS), manifest
    return found


def assert_at_floor(found: dict[str, tuple[int, ...]], where: str) -> None:
    for name, floor in FLOORS.items():
        assert found[name] >= floor, f"{where}: {name} {found[name]} is older than {floor}"


def test_every_image_build_installs_a_runtime_with_the_2025_escape_fixes(run):
    templates = run.of_type(TEMPLATE)
    assert templates
    for template in templates:
        [step] = template.inputs["customize"]
        script = base64.b64decode(step["inline"][0].split()[1]).decode()
        written = f"/install.json <<'{machine_image.HEREDOC_END}'\n"
        manifest = json.loads(script.split(written, 1)[1].split(f"\n{machine_image.HEREDOC_END}\n", 1)[0])
        assert_at_floor(runtime_versions(manifest), template.name)
        runc = next(a for a in manifest["artifacts"] if a["name"] == "runc")
        assert f"/{versions.RUNC_VERSION}/runc.amd64" in runc["url"] and runc["sha256"] == versions.RUNC_SHA256


def test_every_machine_refuses_to_boot_an_older_runtime(run):
    checked = 0
    for registration in run.registrations:
        boot = cloud_init_files(registration).get(install.MANIFEST_PATH)
        if boot is None:
            continue
        assert_at_floor(runtime_versions(json.loads(boot)), registration.name)
        checked += 1
    assert checked >= 3  # the node pools and the NAT hosts at least


def test_the_floor_itself_is_the_fixed_releases():
    # Lowering a floor to let an older pin through fails here: the advisories' first fixed releases.
    assert versions.RUNC_FLOOR >= (1, 2, 8) and versions.CONTAINERD_FLOOR >= (1, 7, 29)
