"""containerd's config.toml is written by tomli-w (a maintained TOML writer): what containerd reads
back is exactly the config the renderer decided, for CPU and GPU nodes alike."""

from __future__ import annotations

import tomllib

import pytest

from infra.catalog.versions import PAUSE_IMAGE
from infra.node import containerd


@pytest.mark.parametrize("gpu", [False, True])
def test_the_rendered_config_reads_back_as_the_decided_one(gpu):
    text = containerd.render_config(PAUSE_IMAGE, gpu)
    assert text.startswith("# Written by supercluster (infra/node/containerd.py).\n")
    assert tomllib.loads(text) == containerd.config(PAUSE_IMAGE, gpu)
