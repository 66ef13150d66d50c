"""Every add-on object is a valid Kubernetes object for the cluster's version (kubernetes-validate, strict).

kubernetes-validate 1.37.0 ships schemas v1.25 to v1.37; it validates against the newest
schema not newer than the version asked for, so a 1.33.4 cluster is checked against v1.33.
No add-on uses a CRD (rules are plain files, not PrometheusRule), so there is no CRD schema
to check against.
"""

from __future__ import annotations

import copy

import pytest

from infra.addons.k8s import object_key
from tests import k8s_schema
from tests.infra.addon_fixtures import all_objects, groups_for, spec_for

STACKS = {
    "dev": {},
    "prod": {},
    # Every setting away from its default, so non-default shapes are validated too.
    "dev-tuned": {
        "addons": {
            "coredns": {"minReplicas": 3, "maxReplicas": 9},
            "nodeLocalDns": {"localIp": "169.254.25.10"},
            "clusterAutoscaler": {"maxTotalUnreadyPercentage": 20, "scaleDownUnreadyEnabled": True},
            "balloons": {"headroomNodes": {"gpu": 1, "cpu": 2}},
            "gpuHealthCheck": {"intervalSeconds": 120},
            "trafficAccounting": {"port": 9455},
            "monitoring": {"retention": "7d", "storageGiB": 50},
        }
    },
}


def _objects(name: str):
    stack = name.split("-")[0]
    return spec_for(stack, **STACKS[name]), all_objects(groups_for(stack, **STACKS[name]))


@pytest.mark.parametrize("name", STACKS)
def test_every_object_passes_strict_schema_validation(name):
    spec, objects = _objects(name)
    assert objects
    for obj in objects:
        try:
            checked = k8s_schema.validate(obj, spec.config.kubernetes_version, strict=True)
        except k8s_schema.ValidationError as error:
            pytest.fail(f"{object_key(obj)}: {'.'.join(map(str, error.path))}: {error.message}")
        assert checked == "1.33", object_key(obj)


def test_validation_is_strict_enough_to_catch_a_typo():
    spec, objects = _objects("dev")
    deployment = copy.deepcopy(next(o for o in objects if o["kind"] == "Deployment"))
    deployment["spec"]["template"]["spec"]["affinty"] = {}
    with pytest.raises(k8s_schema.ValidationError):
        k8s_schema.validate(deployment, spec.config.kubernetes_version, strict=True)


def test_object_identities_are_unique():
    _, objects = _objects("prod")
    identities = [object_key(obj) for obj in objects]
    assert len(identities) == len(set(identities))
