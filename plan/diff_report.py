"""The plan diff as Markdown: printed by ``python -m plan --diff`` and posted on pull requests.

Dangerous changes come first, as a GitHub CAUTION alert; then resources, outputs and
rendered files. File diffs that are identical across resources (one sysctl on every
scale set of a pool) are shown once with the list of files they apply to. The report
stays under ``max_chars`` (a GitHub comment holds 65,536 characters) by leaving out the
last file diffs, and says so.
"""

from __future__ import annotations

from collections import defaultdict

from plan.diff import SYMBOLS, PlanDiff, ResourceChange

# Room for a PR comment: GitHub's limit is 65,536 characters.
DEFAULT_MAX_CHARS = 60_000
_LISTED = 8  # file lists longer than this fold into <details>


def render_diff(
    stack: str, old_label: str, diff: PlanDiff, max_chars: int = DEFAULT_MAX_CHARS, topology: list[str] | None = None
) -> str:
    """The report; ``topology`` is the diagram section (``plan.topology.diff_section``), shown before the tables."""
    lines = [f"## Plan diff: stack `{stack}` (against `{old_label}`)", ""]
    if not diff.changed:
        return "\n".join(lines + ["No changes: every resource, output and rendered file is the same.", ""])
    counts = {action: len(diff.of(action)) for action in SYMBOLS}
    lines += [
        f"**{counts['create']} to create, {counts['update']} to update, {counts['replace']} to replace, "
        f"{counts['delete']} to delete; {len(diff.files_changed)} rendered files changed, "
        f"{len(diff.files_added)} added, {len(diff.files_removed)} removed.**",
        "",
    ]
    if diff.dangers:
        lines += [
            "> [!CAUTION]",
            "> **This change replaces, deletes or unprotects stateful resources, takes more than "
            "one machine of a role down, or resizes a live pool.** "
            "Read the runbook before `pulumi up`.",
            ">",
        ]
        lines += [f"> - `{c.name}` (`{c.type}`): {c.danger}{_why(c)}" for c in diff.dangers]
        lines.append("")
    lines += topology or []
    lines += _resources(diff.resources)
    if diff.outputs:
        lines += ["### Outputs", ""] + [f"- `{path}`" for path in diff.outputs] + [""]
    body = "\n".join(lines) + "\n"
    return body + _files(diff, max_chars - len(body))


def _why(change: ResourceChange) -> str:
    if not change.replacements:
        return ""
    return " — " + "; ".join(f"`{r.path}`: {r.reason}" for r in change.replacements)


def _resources(changes: list[ResourceChange]) -> list[str]:
    if not changes:
        return []
    lines = ["### Resources", "", "| | resource | type | changed inputs |", "|---|---|---|---|"]
    for change in changes:
        inputs = ", ".join(f"`{p}`" for p in change.changed)
        if change.replacements:
            inputs += "<br>**replaced because** " + "; ".join(f"`{r.path}`: {r.reason}" for r in change.replacements)
        if change.previous_urn and change.aliased:
            inputs += f"<br>renamed from `{change.previous_urn}` (alias: same resource)"
        if change.ignored:
            inputs += "<br>ignored (`ignoreChanges`, not applied by `pulumi up`): " + ", ".join(
                f"`{p}`" for p in change.ignored
            )
        lines.append(f"| {SYMBOLS[change.action]} {change.action} | `{change.name}` | `{change.type}` | {inputs} |")
    lines.append("")
    notes: dict[str, list[str]] = defaultdict(list)
    for change in changes:
        if change.note:
            notes[change.note].append(change.name)
    for note, names in notes.items():
        lines += [f"Note ({len(names)} of the resources above): {note}.", ""]
    return lines + [
        "Offline diff: secret inputs show as `[secret]` in both plans, so a changed secret does not appear here.",
        "",
    ]


def _files(diff: PlanDiff, budget: int) -> str:
    if not (diff.files_changed or diff.files_added or diff.files_removed):
        return ""
    lines = ["### Rendered files", ""]
    groups: dict[str, list[str]] = defaultdict(list)
    for path, text in diff.files_changed.items():
        groups[_hunks(text)].append(path)
    omitted: list[str] = []
    for hunks, paths in groups.items():
        title = f"`files/{paths[0]}`" + (f" and {len(paths) - 1} more with the same change" if len(paths) > 1 else "")
        block = (
            [f"#### changed: {title}", ""]
            + (_path_list(paths) if len(paths) > 1 else [])
            + ["```diff", hunks.rstrip("\n"), "```", ""]
        )
        if len("\n".join(lines + block)) > budget - 2_000:
            omitted += paths
            continue
        lines += block
    if omitted:
        lines += [
            f"{len(omitted)} more changed files are not shown here (comment size); "
            "`python -m plan --stack STACK --diff OLD_DIR` shows them all:",
            "",
        ] + _path_list(omitted)
    for title, paths in (("added", diff.files_added), ("removed", diff.files_removed)):
        if paths:
            lines += [f"#### {title}: {len(paths)} files", ""] + _path_list(paths)
    return "\n".join(lines).rstrip("\n") + "\n"


def _hunks(unified: str) -> str:
    """A unified diff without its two file-name lines, so equal changes to different files group."""
    return "\n".join(unified.splitlines()[2:]) + "\n"


def _path_list(paths: list[str]) -> list[str]:
    items = [f"- `files/{p}`" for p in paths]
    if len(items) <= _LISTED:
        return items + [""]
    return [f"<details><summary>{len(items)} files</summary>", ""] + items + ["", "</details>", ""]
