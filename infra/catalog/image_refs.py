"""Container image references, and where each one is cached in the cluster's registry.

Nodes never pull the pause image or the ``images.preload`` list from a public
registry: the cluster's Azure Container Registry caches each upstream registry
through one artifact-cache rule (``<prefix>/*`` <= ``<upstream>/*``), and nodes
pull the cached copy over the registry's private endpoint (components/image_registry.py,
infra/node/pinned_images.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Upstreams ACR's artifact cache supports, and the repository prefix each is cached under
# (MicrosoftDocs/azure-docs articles/container-registry/container-registry-artifact-cache.md,
# "Upstream support"). A prefix is also the cache rule's name.
CACHE_PREFIXES = {
    "registry.k8s.io": "k8s",
    "docker.io": "docker",
    "mcr.microsoft.com": "mcr",
    "ghcr.io": "ghcr",
    "nvcr.io": "nvcr",
    "quay.io": "quay",
    "public.ecr.aws": "ecr-public",
    "gcr.io": "gcr",
}

# registry/repository[:tag][@sha256:digest], lowercase repository path components (OCI distribution spec).
_REFERENCE = re.compile(
    r"(?P<registry>[a-z0-9.-]+)/(?P<repository>[a-z0-9]+(?:[._/-][a-z0-9]+)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(?:@(?P<digest>sha256:[a-f0-9]{64}))?"
)
ACCEPTED = (
    "a fully qualified image reference with a tag or digest (e.g. registry.k8s.io/pause:3.10) "
    "from a registry the cluster's cache supports: " + ", ".join(CACHE_PREFIXES)
)


@dataclass(frozen=True)
class ImageRef:
    registry: str
    repository: str
    tag: str | None
    digest: str | None

    @property
    def suffix(self) -> str:
        return (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")

    def __str__(self) -> str:
        return f"{self.registry}/{self.repository}{self.suffix}"

    def cached_in(self, login_server: str) -> str:
        """The same image in the cluster's registry, e.g. ``prodacr.azurecr.io/k8s/pause:3.10``."""
        return f"{login_server}/{CACHE_PREFIXES[self.registry]}/{self.repository}{self.suffix}"


def parse_image(reference: str) -> ImageRef | None:
    """The reference if it is pinned (tag or digest) and cacheable, else None."""
    match = _REFERENCE.fullmatch(reference)
    if match is None or match["registry"] not in CACHE_PREFIXES or not (match["tag"] or match["digest"]):
        return None
    return ImageRef(match["registry"], match["repository"], match["tag"], match["digest"])


def cache_prefixes(references: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``{prefix: upstream}`` for the upstream registries these images come from, sorted by prefix."""
    upstreams = {ref.registry for ref in map(parse_image, references) if ref is not None}
    return dict(sorted((CACHE_PREFIXES[upstream], upstream) for upstream in upstreams))
