"""Exports the ``cluster`` stack output: the versioned contract other teams read (infra/contract.py)."""

from __future__ import annotations

from collections.abc import Mapping

import pulumi

from infra.assembly.stack_output import cluster_contract
from infra.cluster.cluster_spec import ClusterSpec
from infra.contract import OUTPUT_NAME, to_document


def export_cluster_contract(
    spec: ClusterSpec,
    *,
    resource_group_name: pulumi.Input[str],
    vnet_ids: Mapping[str, pulumi.Input[str]],
    subnet_ids: Mapping[str, pulumi.Input[str]],
    scale_set_ids: Mapping[str, pulumi.Input[str]],
    ca_certificate: pulumi.Input[str],
    etcd_backup_storage_account_id: pulumi.Input[str],
    etcd_backup_container_url: pulumi.Input[str],
) -> dict:
    """Exports and returns the document: no secret in it (contract 2.0 hands out no credential)."""
    document = to_document(
        cluster_contract(
            spec,
            resource_group_name=resource_group_name,
            vnet_ids=vnet_ids,
            subnet_ids=subnet_ids,
            scale_set_ids=scale_set_ids,
            ca_certificate=ca_certificate,
            etcd_backup_storage_account_id=etcd_backup_storage_account_id,
            etcd_backup_container_url=etcd_backup_container_url,
        )
    )
    pulumi.export(OUTPUT_NAME, document)
    return document
