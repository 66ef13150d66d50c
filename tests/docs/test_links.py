"""README and the pages under docs/ link to each other by relative path and heading anchor; a
moved page or a renamed heading must not leave a link that leads nowhere."""

import re
from pathlib import Path

import pytest

from tests.helpers import PROJECT_DIR

PAGES = [PROJECT_DIR / "README.md", *sorted((PROJECT_DIR / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation other than '-' and '_' dropped, spaces
    turned into '-'."""
    found, fence = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and (heading := re.match(r"#{1,6} (.*)", line)):
            found.add(re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-"))
    return found


def relative_links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(PROJECT_DIR)))
def test_every_relative_link_reaches_a_file_and_heading(page):
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{page.name}: {target} names no file"
        if anchor:
            assert anchor in anchors(dest), f"{page.name}: {target} names no heading of {dest.name}"


def test_every_docs_page_is_reachable_from_readme():
    seen, todo = set(), [PROJECT_DIR / "README.md"]
    while todo:
        page = todo.pop()
        if page in seen or page.suffix != ".md" or not page.exists():
            continue
        seen.add(page)
        for target in relative_links(page):
            path = target.partition("#")[0]
            if path:
                todo.append((page.parent / path).resolve())
    unreachable = [str(p.relative_to(PROJECT_DIR)) for p in PAGES if p.resolve() not in seen]
    assert not unreachable, f"pages no link from README leads to: {unreachable}"


def test_the_link_check_finds_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[gone](nowhere.md) [here](#title) [not here](#missing)\n")
    assert relative_links(page) == ["nowhere.md", "#title", "#missing"]
    assert anchors(page) == {"title"}
