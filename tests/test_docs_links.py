"""Every relative link in README.md and docs/*.md points at a file that exists (and a heading there).

The README links each job to its page in docs/, and the pages link to each other, to images and
to source files; a page moved or removed without following its links would leave a reader at a 404.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

# [text](target) and ![alt](target); the target ends at whitespace (an optional "title" follows) or ")".
_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"`+[^`]*`+")


def relative_links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of each relative link outside code blocks and code spans."""
    links: list[tuple[int, str]] = []
    in_fence = False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        for match in _LINK.finditer(_CODE_SPAN.sub("", line)):
            target = match.group(1)
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                continue  # a URL (https:, mailto:)
            links.append((number, target))
    return links


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces to '-'."""
    seen: dict[str, int] = {}
    found = set()
    in_fence = False
    for line in text.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
        heading = None if in_fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """'page:line: target' for each link (with its file's or page's text) whose file or heading is missing."""
    broken = []
    for number, target in relative_links(page.read_text(encoding="utf-8")):
        path, _, anchor = target.partition("#")
        linked = page.parent / path.split("?", 1)[0] if path else page
        missing_anchor = anchor and linked.suffix == ".md" and linked.is_file()
        if not linked.exists() or (missing_anchor and anchor not in anchors(linked.read_text(encoding="utf-8"))):
            broken.append(f"{page.relative_to(root)}:{number}: {target}")
    return broken


def test_pages_are_found() -> None:
    assert ROOT / "README.md" in PAGES and len(PAGES) > 5


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    assert broken_links(page) == []


def test_checker_sees_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# There\n## A heading: `code`, twice\n## A heading: `code`, twice\n")
    page.write_text(
        "# Here\n[ok](there.md) [ok too](there.md#a-heading-code-twice-1) ![img](missing.png) [web](https://example.com)\n"
        "```\n[in a fence](nowhere.md)\n```\n"
        '`[in a span](nowhere.md)` [gone](docs/gone-v1.md "title") [no such heading](there.md#history)\n'
        "[this page](#here) [not on this page](#there)\n",
        encoding="utf-8",
    )
    assert relative_links(page.read_text())[:4] == [
        (2, "there.md"),
        (2, "there.md#a-heading-code-twice-1"),
        (2, "missing.png"),
        (6, "docs/gone-v1.md"),
    ]
    assert broken_links(page, root=tmp_path) == [
        "page.md:2: missing.png",
        "page.md:6: docs/gone-v1.md",
        "page.md:6: there.md#history",
        "page.md:7: #there",
    ]
