from __future__ import annotations

import base64

import pytest

from infra.boot.cloudinit import MAX_CUSTOM_DATA_BASE64_CHARS, CloudConfig, custom_data, render
from tests.helpers import load_yaml


def test_render_is_cloud_config_with_literal_blocks():
    cloud = CloudConfig()
    cloud.add("/etc/a.conf", "line1\nline2\n")
    cloud.runcmd.append(["systemctl", "daemon-reload"])
    text = render(cloud)
    assert text.startswith("#cloud-config\n")
    assert "content: |\n    line1\n    line2\n" in text
    assert load_yaml(text)["write_files"][0]["content"] == "line1\nline2\n"


def test_same_path_twice_is_a_bug():
    cloud = CloudConfig()
    cloud.add("/etc/a", "x")
    with pytest.raises(ValueError, match="written twice"):
        cloud.add("/etc/a", "y")


def test_custom_data_enforces_azure_limit():
    small = custom_data("#cloud-config\n", "vm")
    assert base64.b64decode(small) == b"#cloud-config\n"
    too_big = "x" * (MAX_CUSTOM_DATA_BASE64_CHARS // 4 * 3 + 3)
    with pytest.raises(ValueError, match="over Azure's customData limit of 87380"):
        custom_data(too_big, "vm")
