"""The machine images: an Azure Compute Gallery, one image definition per kind, and the Image Builder
template that builds the configured version of each (infra/assembly/machine_image.py decides what goes in).

``version_ids[kind]`` is the exact gallery image version every machine of that kind references.
The template runs once, when it is created (``autoRun``); Image Builder distributes the result
to ``<image definition>/versions/<machineImageVersion>`` (explicit versioning,
MicrosoftDocs/azure-docs articles/virtual-machines/linux/image-builder-json.md, "Distribute:
sharedImage"). Its name carries the version, so a new version is a new template (the old one
is deleted; the versions it built stay in the gallery). docs/node-image.md is the runbook.
"""

from __future__ import annotations

import pulumi

from components import declare
from components.grants import grant, role_definition
from infra.assembly import machine_image
from infra.config import naming
from infra.config.cluster_config import ClusterConfig

# Built-in role "Contributor", here scoped to the gallery only: Image Builder's identity writes image
# versions into it (learn.microsoft.com/azure/virtual-machines/linux/image-builder-permissions-cli).
CONTRIBUTOR_ROLE = "b24988ac-6180-42a0-ab88-20f7382dd24c"
BUILDER_ROLE = "image-builder"


class MachineImages(pulumi.ComponentResource):
    version_ids: dict[str, pulumi.Output[str]]  # kind -> the version this deploy builds
    definition_ids: dict[str, pulumi.Output[str]]  # kind -> its gallery image definition

    def __init__(
        self,
        name: str,
        *,
        config: ClusterConfig,
        resource_group_name: pulumi.Input[str],
        subscription_id: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("supercluster:images:MachineImages", name, None, opts)
        cluster, version = config.cluster_name, config.machine_image_version
        self._version = version
        # Running machines boot from its image versions: deleting it needs a deliberate unprotect.
        gallery = declare.azure(
            "compute:Gallery",
            f"{name}-gallery",
            {
                "galleryName": naming.compute_gallery(cluster),
                "resourceGroupName": resource_group_name,
                "location": config.location,
                "description": f"Machine images of the {cluster} cluster, built by supercluster",
            },
            pulumi.ResourceOptions(parent=self, protect=True),
            outputs=["name"],
        )
        builder = declare.azure(
            "managedidentity:UserAssignedIdentity",
            f"{name}-id-{BUILDER_ROLE}",
            {
                "resourceName": naming.role_identity(cluster, BUILDER_ROLE),
                "resourceGroupName": resource_group_name,
                "location": config.location,
            },
            pulumi.ResourceOptions(parent=self),
            outputs=["principalId"],
        )
        may_write = grant(
            self,
            f"{name}-builder-gallery",
            key=f"{cluster}/{BUILDER_ROLE}",
            scope=gallery.id,
            principal_id=builder.output("principalId"),
            role_definition_id=role_definition(subscription_id, CONTRIBUTOR_ROLE),
        )
        self.version_ids, self.definition_ids = {}, {}
        for kind in machine_image.kinds_in_use(config):
            definition = declare.azure(
                "compute:GalleryImage",
                f"{name}-{kind}",
                {
                    "galleryImageName": naming.gallery_image(cluster, kind),
                    "galleryName": gallery.output("name"),
                    "resourceGroupName": resource_group_name,
                    "location": config.location,
                    "osType": "Linux",
                    "osState": "Generalized",  # Image Builder deprovisions the build VM before capture
                    "hyperVGeneration": "V2",  # both base images are Gen2 (infra/catalog/versions.py)
                    "architecture": "x64",
                    "identifier": {"publisher": "supercluster", "offer": cluster, "sku": kind},
                },
                pulumi.ResourceOptions(parent=self, protect=True),
            )
            template = declare.azure(
                "virtualmachineimages:VirtualMachineImageTemplate",
                f"{name}-{kind}-template",
                {
                    "imageTemplateName": naming.image_template(cluster, kind, version),
                    "resourceGroupName": resource_group_name,
                    "location": config.location,
                    "identity": {"type": "UserAssigned", "userAssignedIdentities": [builder.id]},
                    "source": {"type": "PlatformImage", **machine_image.BASE_IMAGES[kind]},
                    "customize": [
                        {
                            "type": "Shell",
                            "name": f"supercluster-{kind}",
                            "inline": machine_image.customizer_commands(config, kind),
                        }
                    ],
                    "distribute": [
                        {
                            "type": "SharedImage",
                            "galleryImageId": definition.id.apply(lambda image_id: f"{image_id}/versions/{version}"),
                            "runOutputName": f"{kind}-{version}",
                            # Never "latest" for anyone: machines name their version explicitly.
                            "excludeFromLatest": True,
                            "targetRegions": [
                                {
                                    "name": config.location,
                                    "replicaCount": machine_image.REPLICAS,
                                    "storageAccountType": "Standard_ZRS",
                                }
                            ],
                        }
                    ],
                    "vmProfile": {
                        "vmSize": machine_image.BUILD_VM_SIZE,
                        "osDiskSizeGB": machine_image.BUILD_OS_DISK_GB[kind],
                    },
                    "buildTimeoutInMinutes": machine_image.BUILD_TIMEOUT_MINUTES,
                    "autoRun": {"state": "Enabled"},
                    "tags": {
                        "supercluster.io_image-contents": machine_image.fingerprint(config, kind),
                        "supercluster.io_kubernetes-version": config.kubernetes_version,
                    },
                },
                pulumi.ResourceOptions(
                    parent=self,
                    depends_on=[may_write],
                    # Azure refuses updates to an image template: a change is a new template.
                    replace_on_changes=["*"],
                    delete_before_replace=True,
                ),
            )
            self.version_ids[kind] = pulumi.Output.all(definition.id, template.id).apply(
                lambda ids: f"{ids[0]}/versions/{version}"
            )
            self.definition_ids[kind] = definition.id
        self.register_outputs({"galleryId": gallery.id, "versionIds": self.version_ids})

    def version_id(self, kind: str, version: str) -> pulumi.Output[str]:
        """An exact image version of ``kind``: this deploy's build, or one an earlier deploy built (Image
        Builder's versions stay in the gallery when their template is replaced)."""
        if version == self._version:
            return self.version_ids[kind]
        return self.definition_ids[kind].apply(lambda definition_id: f"{definition_id}/versions/{version}")
