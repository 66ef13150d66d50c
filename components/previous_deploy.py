"""What the last ``pulumi up`` of this stack exported, and the checks that need it.

A ``StackReference`` to the stack itself reads the outputs of its last deploy: the program's
new outputs are written only when it finishes, so during a run the reference still sees the
previous ones (none on the first deploy). This component runs three checks on them: a node
pool may leave the config only if the last deploy had retired it (``infra/pool_retirement.py``),
an etcd cluster grows or shrinks by one member per deploy (``infra/etcd/membership_change.py``),
no scale set may move into the node resource group (``infra/node_group.py``), and a machine
image version the last deploy built is never rebuilt with other contents (``infra/machine_image.py``).
The day-2
rules (``infra/day2.py``) read the same outputs synchronously, before anything is declared
(``components.stack_config.previous_outputs``).

A refused change must change nothing. Pulumi deletes what the program no longer declares only
after the program has finished without error (pulumi/pulumi
``pkg/resource/deploy/deployment_executor.go``: a source error bails out before
``performDeletes``), so a failed check never deletes. ``gate`` also holds back creates and
updates: ``__main__.py`` passes the resource group's name through it, and every resource in
the group waits for the group.
"""

from __future__ import annotations

from typing import Any, TypeVar

import pulumi

from components.stack_config import ConfigRunError, own_stack_name
from infra import machine_image
from infra.config import ClusterConfig
from infra.contract import OUTPUT_NAME
from infra.errors import ConfigError
from infra.etcd.membership_change import CLIENT_URL_OUTPUTS, check_member_changes
from infra.node_group import check_scale_sets_stay
from infra.pool_retirement import check_pool_removals

T = TypeVar("T")


def _checked(outputs: dict[str, Any], config: ClusterConfig) -> bool:
    try:
        check_pool_removals(outputs[OUTPUT_NAME], config)
        check_member_changes(outputs, config)
        check_scale_sets_stay(outputs[OUTPUT_NAME], config.cluster_name)
        machine_image.check_version_not_reused(outputs[machine_image.OUTPUT_NAME], config)
    except ConfigError as error:
        raise ConfigRunError(error) from None
    return True


class PreviousDeploy(pulumi.ComponentResource):
    checked: pulumi.Output[bool]  # resolves once the checks pass; fails the program with one line otherwise

    def __init__(self, name: str, *, config: ClusterConfig, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("supercluster:previous_deploy:PreviousDeploy", name, None, opts)
        reference = pulumi.StackReference(
            f"{name}-stack", stack_name=own_stack_name(), opts=pulumi.ResourceOptions(parent=self)
        )
        names = [OUTPUT_NAME, machine_image.OUTPUT_NAME, *CLIENT_URL_OUTPUTS.values()]
        outputs = pulumi.Output.all(*[reference.get_output(name) for name in names])
        self.checked = outputs.apply(lambda values: _checked(dict(zip(names, values, strict=True)), config))
        self.register_outputs({})

    def gate(self, value: T) -> pulumi.Output[T]:
        """``value``, available only after the checks passed. Not secret: the ``cluster`` output it waits
        for is secret (it holds the kubeconfig), but nothing of it reaches ``value``."""
        return pulumi.Output.unsecret(self.checked.apply(lambda _: value))
