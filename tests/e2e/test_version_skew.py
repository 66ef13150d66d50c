"""The skew check the staged-upgrade scenario applies after every deploy (fast: no box)."""

from __future__ import annotations

from tests.e2e.version_skew import skew_violations

MIDWAY = {"a0": "v1.34.0", "a1": "v1.33.4"}


def test_midway_through_an_upgrade_each_component_beside_its_own_apiserver_is_allowed():
    components = {"a0/kube-controller-manager": ("v1.34.0", "a0"), "a1/kube-controller-manager": ("v1.33.4", "a1")}
    assert skew_violations(MIDWAY, components, ["v1.33.4", "v1.31.0"]) == []


def test_a_controller_manager_newer_than_the_apiserver_it_talks_to_is_a_violation():
    assert skew_violations(MIDWAY, {"a1/kube-controller-manager": ("v1.34.0", "a1")}, []) != []
    # Through the load balancer it may reach either: it must not be newer than the oldest.
    assert skew_violations(MIDWAY, {"x/kube-scheduler": ("v1.34.0", None)}, []) != []
    assert skew_violations(MIDWAY, {"a0/kube-scheduler": ("v1.32.9", "a0")}, []) != []  # two minors older


def test_apiservers_two_minors_apart_or_a_kubelet_newer_than_one_are_violations():
    assert skew_violations({"a0": "v1.34.0", "a1": "v1.32.9"}, {}, []) != []
    assert skew_violations(MIDWAY, {}, ["v1.34.0"]) != []
    assert skew_violations(MIDWAY, {}, ["v1.30.2"]) != []  # four minors older than the newest
