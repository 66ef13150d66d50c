"""Every container image in the rendered plan comes from the cluster's own registry, by digest, from the one table.

Walks the Kubernetes objects the program declares for dev and prod (not the add-on builders), so an
image added anywhere, by any add-on, is checked. A failure lists every offending image at once.
"""

from __future__ import annotations

import pytest

from infra.addons import _containers, images
from infra.catalog.image_refs import CACHE_PREFIXES
from infra.config import naming
from plan.artifacts import kubernetes_object
from tests.helpers import parsed

UPSTREAM_OF_PREFIX = {prefix: upstream for upstream, prefix in CACHE_PREFIXES.items()}


def plan_images(run) -> dict[str, list[str]]:
    """``{image: [kind/name of each object naming it]}`` over every declared Kubernetes object."""
    found: dict[str, list[str]] = {}
    for obj in filter(None, map(kubernetes_object, run.registrations)):
        for container in _containers(obj):
            found.setdefault(container["image"], []).append(f"{obj['kind']}/{obj['metadata']['name']}")
    return found


def upstream(image: str, login_server: str) -> str:
    """``<acr>/<prefix>/<path>`` back to the upstream reference the table holds."""
    prefix, path = image.removeprefix(f"{login_server}/").split("/", 1)
    return f"{UPSTREAM_OF_PREFIX[prefix]}/{path}"


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_pod_image_is_pulled_from_the_cluster_registry_by_digest(stack, request):
    run = request.getfixturevalue(f"{stack}_plan")
    login_server = naming.container_registry_login_server(parsed(stack).cluster_name)
    found = plan_images(run)
    assert found, "the plan declares no pod at all"
    elsewhere = {i: users for i, users in found.items() if not i.startswith(f"{login_server}/")}
    assert not elsewhere, f"pulled from outside {login_server}: {elsewhere}"
    not_in_table = {i: users for i, users in found.items() if upstream(i, login_server) not in images.table()}
    assert not not_in_table, f"not from infra/addons/images.py: {not_in_table}"
    undigested = {
        i: users
        for i, users in found.items()
        if "@sha256:" not in i and upstream(i, login_server) not in images.AWAITING_DIGEST
    }
    assert not undigested, f"no digest and not listed in images.AWAITING_DIGEST: {undigested}"


def test_awaiting_digest_hides_no_pinned_image():
    """The exemption list holds exactly the table's references without a digest, nothing more."""
    assert set(images.AWAITING_DIGEST) == {ref for ref in images.table() if "@sha256:" not in ref}


def test_every_table_image_is_cacheable_and_pinned_by_tag_and_digest_or_waiting():
    for reference in images.table():
        cached = images.in_cluster_registry(reference, "x.azurecr.io")
        assert cached.startswith("x.azurecr.io/") and cached.endswith(reference.split("/", 1)[1])
        assert "@sha256:" in reference or reference in images.AWAITING_DIGEST


def test_a_public_image_is_refused_by_the_registry_function():
    with pytest.raises(ValueError, match="not a pinned image"):
        images.in_cluster_registry("example.com/app:1", "x.azurecr.io")
