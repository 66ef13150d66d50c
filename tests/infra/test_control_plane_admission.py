"""The apiserver's admission configuration and the team-pool runbook that relies on it.

Behaviour against the real apiserver is in tests/e2e/test_dev_cluster.py (tenant pods refused,
the team namespace's defaults and whitelist applied)."""

from __future__ import annotations

import re

from infra.control_plane import admission
from plan.stackfile import PROJECT_DIR
from tests.helpers import load_yaml, parsed


def test_tenants_enforce_baseline_and_only_kube_system_is_exempt():
    document = load_yaml(admission.admission_configuration(parsed("prod")))
    plugins = {p["name"]: p["configuration"] for p in document["plugins"]}
    pod_security = plugins["PodSecurity"]
    assert pod_security["defaults"]["enforce"] == "baseline"
    assert pod_security["defaults"]["warn"] == pod_security["defaults"]["audit"] == "restricted"
    assert pod_security["defaults"]["enforce-version"] == "v1.33"
    assert pod_security["exemptions"]["namespaces"] == ["kube-system"]
    assert set(plugins) >= {"PodTolerationRestriction", "PodNodeSelector"}
    assert {"PodTolerationRestriction", "PodNodeSelector"} <= set(admission.PLUGINS)


def test_the_runbooks_team_namespace_is_the_one_the_code_renders():
    readme = (PROJECT_DIR / "docs" / "runbooks" / "team-isolation.md").read_text()
    section = readme[readme.index("# Team isolation") :]
    block = re.search(r"```yaml\n((?:   .*\n)*?   apiVersion: v1\n   kind: Namespace\n(?:   .*\n)*?)   ```", section)
    shown = load_yaml("\n".join(line[3:] for line in block.group(1).splitlines()))
    assert shown == admission.team_namespace("team-vision", "vision")


def test_a_team_whitelist_admits_what_the_apiserver_adds_to_every_pod():
    annotations = admission.team_namespace("t", "vision")["metadata"]["annotations"]
    whitelist = load_yaml(annotations[admission.TOLERATIONS_WHITELIST_ANNOTATION])
    keys = {t["key"] for t in whitelist}
    assert keys == {
        "supercluster.io/team",
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/memory-pressure",
    }
