"""ClusterAddons under Pulumi mocks: what it declares is exactly what infra.addons renders, through the provider."""

from __future__ import annotations

import pulumi
import pytest

from components import declare
from components.addons import ClusterAddons
from infra.addons import cluster_autoscaler
from infra.addons.k8s import object_key
from infra.assembly.desired_cluster import DeployTime
from plan.artifacts import collect_files, kubernetes_object
from plan.runner import run_declarations
from tests import k8s_schema
from tests.helpers import load_yaml
from tests.infra.addon_fixtures import AZURE, cluster_for, groups_of, spec_for

HEADROOM = {"balloons": {"headroomNodes": {"cpu": 1, "gpu": 1}}}


def _run(addons=None, stack="dev"):
    spec = spec_for(stack, addons if addons is not None else dict(HEADROOM))
    providers: dict[str, object] = {}

    def spy(args: pulumi.ResourceTransformationArgs):
        if args.type_.startswith("kubernetes:") and not args.type_.startswith("pulumi:providers"):
            providers[args.name] = args.opts.provider
        return None

    def program():
        pulumi.runtime.register_stack_transformation(spy)
        provider = declare.provider("kubernetes", "k8s", {"kubeconfig": "<fake>"})
        providers["__expected__"] = provider
        ClusterAddons(f"{stack}-addons", groups=groups_of(spec), provider=provider)

    return spec, run_declarations(program), providers


@pytest.fixture(scope="module")
def dev_run():
    return _run()


def _declared(run):
    return [
        r
        for r in run.registrations
        if r.type.startswith("kubernetes:") and r.custom and not r.type.startswith("pulumi:providers")
    ]


def test_declares_exactly_the_rendered_objects(dev_run):
    spec, run, _ = dev_run
    rendered = [obj for objs in groups_of(spec).values() for obj in objs]
    declared = {object_key(obj): obj for obj in map(kubernetes_object, _declared(run))}
    assert set(declared) == {object_key(obj) for obj in rendered}
    for obj in rendered:
        assert declared[object_key(obj)] == obj, object_key(obj)


def test_every_object_goes_through_the_given_provider_under_the_component(dev_run):
    _, run, providers = dev_run
    component = run.named("dev-addons", "supercluster:addons:ClusterAddons")
    expected = providers["__expected__"]
    for registration in _declared(run):
        assert registration.parent == component.urn
        assert registration.name.startswith("dev-addons-")
        assert providers[registration.name] is expected, registration.name


def test_workloads_wait_for_their_namespace_and_priority_class(dev_run):
    _, run, _ = dev_run
    by_name = {r.name: r for r in _declared(run)}
    balloon = by_name["dev-addons-deployment-balloons-balloon-cpu"]
    assert set(balloon.options["dependsOn"]) == {
        by_name["dev-addons-namespace-balloons"].urn,
        by_name["dev-addons-priorityclass-supercluster-balloons"].urn,
    }
    health = by_name["dev-addons-daemonset-kube-system-gpu-health-check-gpu"]
    assert by_name["dev-addons-runtimeclass-nvidia"].urn in health.options["dependsOn"]


def test_plan_files_hold_every_object_and_each_passes_schema_validation(dev_run):
    spec, run, _ = dev_run
    files = {path: text for path, text in collect_files(run.registrations).items() if path.startswith("k8s/")}
    assert len(files) == len(_declared(run))
    for text in files.values():
        document = load_yaml(text)
        k8s_schema.validate(document, spec.config.kubernetes_version, strict=True)
    assert "k8s/kube-system/Deployment-coredns.yaml" in files
    assert "k8s/_cluster/PriorityClass-supercluster-workloads.yaml" in files


def test_turning_monitoring_off_removes_exactly_its_resources(dev_run):
    spec, run, _ = dev_run
    _, without, _ = _run({**HEADROOM, "monitoring": {"enabled": False}})
    monitoring = {object_key(obj) for obj in groups_of(spec)["monitoring"]}
    before = {object_key(kubernetes_object(r)): r for r in _declared(run)}
    after = {object_key(kubernetes_object(r)): r for r in _declared(without)}
    assert set(before) - set(after) == monitoring
    for key, registration in after.items():
        assert registration.inputs == before[key].inputs and registration.name == before[key].name


def test_the_deploy_fills_in_what_only_it_knows():
    """The assembly leaves the autoscaler's subscription and identity as markers; the component puts the
    deploy's values in their place, and nothing else changes."""
    cluster = cluster_for("dev")

    def program():
        provider = declare.provider("kubernetes", "k8s", {"kubeconfig": "<fake>"})
        ClusterAddons(
            "dev-addons",
            groups=cluster.addons,
            provider=provider,
            deploy_time={
                DeployTime.SUBSCRIPTION_ID: AZURE.subscription_id,
                DeployTime.AUTOSCALER_CLIENT_ID: AZURE.identity_client_id,
            },
        )

    declared = {object_key(obj): obj for obj in map(kubernetes_object, _declared(run_declarations(program)))}
    [deployment] = [o for o in cluster.addons["cluster_autoscaler"] if o["kind"] == "Deployment"]
    [container] = declared[object_key(deployment)]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["ARM_SUBSCRIPTION_ID"] == AZURE.subscription_id
    assert env["ARM_USER_ASSIGNED_IDENTITY_ID"] == AZURE.identity_client_id
    assert DeployTime.SUBSCRIPTION_ID in [
        e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    ]
    assert deployment["metadata"]["name"] == cluster_autoscaler.NAME
