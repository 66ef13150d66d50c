"""Whole-stack checks of the add-ons, as __main__.py declares them (``components.addons.ClusterAddons``)."""

from __future__ import annotations

import pytest

from infra.addons import cluster_autoscaler, monitoring
from infra.addons.k8s import object_key
from infra.addons.monitoring import alertmanager, credential
from plan.artifacts import kubernetes_object
from tests.conftest import plan_stack
from tests.infra.addon_fixtures import groups_of, spec_for

ADDONS = "supercluster:addons:ClusterAddons"


def _objects(run):
    return {object_key(o) for o in map(kubernetes_object, run.registrations) if o is not None}


@pytest.mark.slow  # a sequence of whole-program runs (seconds)
def test_turning_an_addon_off_removes_exactly_its_objects_from_the_plan(dev_plan):
    assert dev_plan.of_type(ADDONS)
    without = plan_stack("dev", "addons.monitoring.enabled=false")
    its_objects = {object_key(o) for o in groups_of(spec_for("dev"))["monitoring"]}
    # ... and the stack's credentials, which the deploy declares beside them (components/monitoring_access.py).
    secrets = {("Secret", monitoring.NAMESPACE, name) for name in (credential.SECRET, alertmanager.CLUSTER_TLS_SECRET)}
    assert _objects(dev_plan) - _objects(without) == its_objects | secrets
    assert _objects(without) < _objects(dev_plan)


def test_bad_addon_setting_stops_the_plan_with_one_line(tmp_path, capsys):
    from plan.__main__ import main

    out = tmp_path / "plan"
    assert (
        main(["--stack", "dev", "--out", str(out), "--config", "addons.clusterAutoscaler.maxTotalUnreadyPercentage=60"])
        == 2
    )
    err = capsys.readouterr().err
    assert err == (
        "error: invalid config supercluster:addons.clusterAutoscaler.maxTotalUnreadyPercentage = 60: "
        "expected a whole number from 1 to 49\n"
    )
    assert not out.exists()


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_autoscaler_discovers_every_node_scale_set_by_the_tags_it_carries(stack, dev_plan, prod_plan):
    """The autoscaler's --node-group-auto-discovery and the scale sets' tags, read from the same plan: a
    scale set missing one discovery tag would never be scaled (nor scaled down)."""
    run = {"dev": dev_plan, "prod": prod_plan}[stack]
    [deployment] = [
        r
        for r in run.of_type("kubernetes:apps/v1:Deployment")
        if r.inputs["metadata"]["name"] == cluster_autoscaler.NAME
    ]
    [container] = deployment.inputs["spec"]["template"]["spec"]["containers"]
    [discovery] = [
        a.split("=", 1)[1]
        for a in container["command"] + container.get("args", [])
        if a.startswith("--node-group-auto-discovery=")
    ]
    kind, _, pairs = discovery.partition(":")
    assert kind == "label"
    wanted = dict(pair.split("=", 1) for pair in pairs.split(","))
    assert wanted
    scale_sets = run.node_scale_sets()
    assert scale_sets
    for vmss in scale_sets:
        assert wanted.items() <= vmss.inputs["tags"].items(), vmss.name


@pytest.mark.parametrize(
    "name,keys",
    [
        (credential.SECRET, credential.secret_data("p", "h", "g", 0)),
        (alertmanager.CLUSTER_TLS_SECRET, alertmanager.cluster_tls_data("ca", "cert", "key")),
    ],
)
def test_the_monitoring_credentials_are_secrets_whose_every_value_the_plan_masks(prod_plan, name, keys):
    """The deploy makes the stack's passwords and the Alertmanager mesh's certificate and key and hands them to the
    cluster only in these Secrets; the plan (and so every preview) shows their keys and none of their values."""
    (secret,) = [
        o
        for o in map(kubernetes_object, prod_plan.registrations)
        if o is not None and object_key(o) == ("Secret", monitoring.NAMESPACE, name)
    ]
    assert secret["stringData"] == {key: "[secret]" for key in keys}
