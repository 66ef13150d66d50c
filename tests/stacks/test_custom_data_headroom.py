"""Every machine's cloud-init keeps room under Azure's customData limit for the next boot program.

Azure refuses a VM or scale set whose decoded customData is over 65,535 bytes (``CUSTOM_DATA_MAX_BYTES``,
checked by tests/azure_rules.py); a change that crosses it fails only at deploy time, on the machine that
grew. This test fails first, while there is still room to make: compress a program
(``cloudinit.File.compressed``) or move a large file elsewhere before adding another.
"""

from __future__ import annotations

from infra.boot.cloudinit import COMPRESSED
from plan.artifacts import cloud_init_entries, custom_data_of, file_content
from tests.azure_rules import CUSTOM_DATA_MAX_BYTES

# 16 KiB: room for one more boot program as large as the largest the cluster ships, the node certificates'
# approver (about 15 KB of the apiservers' customData compressed, its unit and settings about 2 KB more).
HEADROOM_BYTES = 16 * 1024


def test_every_machine_of_dev_and_prod_leaves_headroom_under_azures_custom_data_limit(dev_plan, prod_plan):
    sizes = {
        registration.name: len(text.encode())
        for run in (dev_plan, prod_plan)
        for registration in run.registrations
        if (text := custom_data_of(registration)) is not None
    }
    assert any("control-plane" in name for name in sizes) and any("-etcd-" in name for name in sizes), sizes
    over = {name: size for name, size in sizes.items() if size > CUSTOM_DATA_MAX_BYTES - HEADROOM_BYTES}
    assert not over, (
        f"decoded customData over {CUSTOM_DATA_MAX_BYTES} - {HEADROOM_BYTES} bytes (Azure's limit less the headroom "
        f"kept for the next boot program): {over}"
    )


# Below this a program's gzip and base64 saves too little to make its cloud-init entry unreadable.
SMALL_PROGRAM_BYTES = 1024


def test_every_program_of_a_kilobyte_or_more_is_written_compressed(dev_plan, prod_plan):
    """A machine only executes its programs, and the plan's files show them decoded (``file_content``), so each
    but the smallest takes its compressed size in customData (a third or less)."""
    plain = set()
    for run in (dev_plan, prod_plan):
        for registration in run.registrations:
            text = custom_data_of(registration)
            for path, entry in cloud_init_entries(text or "").items():
                program = int(entry["permissions"], 8) & 0o111
                if program and len(file_content(entry)) >= SMALL_PROGRAM_BYTES and entry.get("encoding") != COMPRESSED:
                    plain.add((registration.name.split("-s0")[0], path))
    assert not plain, sorted(plain)
