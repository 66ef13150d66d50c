"""systemd units rendered from plain values: one flag per line, sorted, so diffs are trivial."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

# The sandbox of a long-running program that reads its files and talks over the network (systemd.exec(5)): it gains
# no privilege (setuid, file capabilities), sees the whole file system read-only but for what its unit grants it
# (a StateDirectory=), no home directory, and a /tmp of its own. The apiservers' approver and token minter run in it.
NETWORK_CLIENT_SANDBOX: Mapping[str, str] = MappingProxyType(
    {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes"}
)


def flags(args: Mapping[str, str | int | bool]) -> list[str]:
    """``--key=value`` in sorted order; booleans are written as ``true``/``false``."""
    rendered = []
    for key in sorted(args):
        value = args[key]
        if isinstance(value, bool):
            value = "true" if value else "false"
        rendered.append(f"--{key}={value}")
    return rendered


def unit(
    description: str,
    exec_start: Sequence[str],
    *,
    after: Sequence[str] = (),
    requires: Sequence[str] = (),
    wants: Sequence[str] = (),
    service: Mapping[str, str] | None = None,
    wanted_by: str | None = "multi-user.target",
    unit_extra: Mapping[str, str] | None = None,
) -> str:
    """A ``[Unit]/[Service]/[Install]`` file; ``exec_start`` is the binary followed by its flags.
    ``wanted_by=None`` leaves out ``[Install]`` (a service only ever started by a timer or another unit)."""
    lines = ["[Unit]", f"Description={description}"]
    if after:
        lines.append("After=" + " ".join(after))
    if requires:
        lines.append("Requires=" + " ".join(requires))
    if wants:
        lines.append("Wants=" + " ".join(wants))
    for key, value in (unit_extra or {}).items():
        lines.append(f"{key}={value}")
    lines += ["", "[Service]"]
    command = list(exec_start)
    lines.append("ExecStart=" + " \\\n  ".join(command))
    service_settings = {"Restart": "always", "RestartSec": "5"}
    service_settings.update(service or {})
    lines += [f"{key}={value}" for key, value in service_settings.items()]
    if wanted_by is not None:
        lines += ["", "[Install]", f"WantedBy={wanted_by}"]
    lines.append("")
    return "\n".join(lines)


def timer(description: str, on_calendar: str, *, timer_settings: Mapping[str, str] | None = None) -> str:
    """A ``.timer`` that starts the service of the same name on a calendar schedule."""
    lines = ["[Unit]", f"Description={description}", "", "[Timer]", f"OnCalendar={on_calendar}"]
    lines += [f"{key}={value}" for key, value in (timer_settings or {}).items()]
    lines += ["", "[Install]", "WantedBy=timers.target", ""]
    return "\n".join(lines)
