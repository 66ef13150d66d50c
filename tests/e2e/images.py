"""The container images real nodes of the cluster in a box run, built here from Go-module binaries.

Each is one layer holding one static binary (``imagebuild``, tests/e2e/go/images/cmd/imagebuild):
- the sandbox (pause) image under the rendered ``sandbox_image`` reference, as the archive the machine
  image carries (``infra.node.pinned_images.archive_path``): the rendered preload unit imports it, as on Azure;
- CoreDNS (the ``github.com/coredns/coredns`` build) under the reference the plan's CoreDNS Deployment
  names. That reference is pinned by the upstream image's digest, which an image built here cannot
  have: the node's containerd gets the image under the pinned name (``ctr images tag``), so the
  Deployment runs unchanged; this is the one digest-pinned reference the box stands in for;
- the probe (tests/e2e/go/images/cmd/probe), the tests' own image, named in the cluster's registry.
Images other than the pause image are imported into each real node's containerd by the harness: no
registry serves them (docs/cluster-in-a-box.md).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from infra.node import pinned_images as node_images
from tests.e2e.plan_machines import Plan

PROBE_REPOSITORY = "supercluster/e2e-probe"
PROBE_TAG = "box"


@dataclass(frozen=True)
class Image:
    reference: str  # what the archive names it
    archive: Path
    aliases: tuple[str, ...] = ()  # further names it gets on a node


@dataclass(frozen=True)
class BoxImages:
    pause: Image
    coredns: Image
    probe: Image

    @property
    def imported(self) -> tuple[Image, ...]:
        """Those the harness loads into a node's containerd itself (the pause image comes by the preload)."""
        return (self.coredns, self.probe)


def _registry(plan: Plan) -> str:
    """The cluster registry's login server, as the nodes' rendered preload manifest names it."""
    machine = plan.scale_sets()[0]
    return _preload_manifest(machine.files)["registry"]


def _preload_manifest(files: Path) -> dict:
    return json.loads((files / node_images.MANIFEST_PATH.lstrip("/")).read_text())


def _coredns_reference(plan: Plan) -> str:
    for _, document in plan.kubernetes_objects():
        if document.get("kind") == "Deployment" and document["metadata"]["name"] == "coredns":
            (container,) = document["spec"]["template"]["spec"]["containers"]
            return container["image"]
    raise AssertionError("the plan has no CoreDNS Deployment")


def _build(binaries: Path, reference: str, program: str, archive: Path) -> None:
    subprocess.run(
        [
            str(binaries / "imagebuild"),
            "-ref",
            reference,
            "-entrypoint",
            f"/{program}",
            "-archive",
            str(archive),
            f"{binaries / program}=/{program}",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )


def build_images(plan: Plan, binaries: Path, folder: Path) -> BoxImages:
    folder.mkdir(parents=True, exist_ok=True)
    sandbox = _preload_manifest(plan.scale_sets()[0].files)["images"][0]["source"]
    # `<registry>/<repository>:<tag>@<digest>` in the cluster's registry; containerd's CRI looks such a
    # reference up by `<registry>/<repository>@<digest>`.
    tagged, _, digest = _coredns_reference(plan).partition("@")
    by_digest = (f"{tagged.rsplit(':', 1)[0]}@{digest}",) if digest else ()
    probe = f"{_registry(plan)}/{PROBE_REPOSITORY}:{PROBE_TAG}"
    images = BoxImages(
        pause=Image(sandbox, folder / "pause.tar"),
        coredns=Image(tagged, folder / "coredns.tar", aliases=by_digest),
        probe=Image(probe, folder / "probe.tar"),
    )
    for image, program in ((images.pause, "pause"), (images.coredns, "coredns"), (images.probe, "probe")):
        _build(binaries, image.reference, program, image.archive)
    return images
