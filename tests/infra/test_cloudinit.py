from __future__ import annotations

import base64
import gzip

import pytest

from infra.boot.cloudinit import MAX_CUSTOM_DATA_BASE64_CHARS, CloudConfig, custom_data, render
from plan import artifacts
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


def test_a_compressed_file_is_written_as_cloud_init_decodes_it_and_read_back_whole_by_the_plan():
    """``gz+b64``: cloud-init gunzips the base64-decoded content before writing it; the plan's files/ copy is the
    text itself, and the same text always renders the same bytes (a preview shows no change)."""
    program = "#!/usr/bin/python3\n" + "print('a node program')\n" * 200
    cloud = CloudConfig()
    cloud.add("/usr/local/sbin/program", program, permissions="0755", compressed=True)
    text = render(cloud)
    (entry,) = load_yaml(text)["write_files"]
    assert entry["encoding"] == "gz+b64" and entry["permissions"] == "0755"
    assert gzip.decompress(base64.b64decode(entry["content"])).decode() == program
    assert len(entry["content"]) < len(program) / 3
    assert render(cloud) == text
    assert artifacts.file_content(entry) == program
