"""The Kubernetes version-skew policy (kubernetes.io/releases/version-skew-policy), checked on what a box runs
(the staged upgrade, tests/e2e/test_upgrade.py). The program enforces its own half before a deploy
(infra/day2/deploy_rules.py: never down, one minor at a time, nodes after the apiservers); this reads the
running versions back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def minor(version: str) -> int:
    return int(version.removeprefix("v").split(".")[1])


def skew_violations(
    apiservers: Mapping[str, str], components: Mapping[str, tuple[str, str | None]], kubelets: Sequence[str]
) -> list[str]:
    """The version-skew policy (kubernetes.io/releases/version-skew-policy) on what runs: the apiservers
    within one minor of each other; a controller-manager or scheduler never newer than the apiserver it
    talks to (``components``: name -> (version, that apiserver's name, or None for any of them)) and at
    most one minor older; a kubelet never newer than the oldest apiserver and at most three minors older."""
    found = []
    minors = {name: minor(v) for name, v in apiservers.items()}
    if max(minors.values()) - min(minors.values()) > 1:
        found.append(f"apiservers more than one minor apart: {dict(apiservers)}")
    for name, (version, peer) in components.items():
        peers = [minors[peer]] if peer else list(minors.values())
        if minor(version) > min(peers) or minor(version) < max(peers) - 1:
            found.append(f"{name} at {version} against apiserver minors {peers}")
    for version in sorted(set(kubelets)):
        if minor(version) > min(minors.values()) or minor(version) < max(minors.values()) - 3:
            found.append(f"a kubelet at {version} against apiservers {sorted(set(apiservers.values()))}")
    return found
