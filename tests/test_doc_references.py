"""Every reference to a section of a page names one that exists (issue 66): code comments, docs
and the README cite sections as ``docs/X.md#anchor``, ``[text](X.md#anchor)`` or ``docs/X.md,
"Section title"`` (a title may be cut short: it names the first heading that starts with it).
Sections move when a page is split; a citation left behind sends the reader nowhere."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [*sorted((ROOT / "dp_dask").rglob("*.py")), *sorted((ROOT / "docs").glob("*.md")),
           ROOT / "README.md"]
QUOTE = r"[\"“]([^\"”]+)[\"”]"
# A markdown link with an anchor: [text](page.md#anchor) or (docs/page.md#anchor).
LINK = re.compile(r"\]\(([\w./-]*\.md)#([^)\s]+)\)|\b((?:docs|benchmarks)/[\w-]+\.md)#([\w-]+)")
# A page named, then one or more titles in quotes: docs/X.md, "A" / docs/X.md ("A", "B") /
# docs/X.md, section "A" / docs/X.md: "A", "B" and "C".
NAMED = re.compile(r"\b((?:docs|benchmarks)/[\w-]+\.md)[,:]?\s*[([]?(?:sections?\s+)?"
                   rf"((?:{QUOTE}(?:,\s*|\s+and\s+|\s+or\s+)?)+)")


@cache
def headings(page: Path) -> tuple[str, ...]:
    """The headings of a markdown page, outside its code blocks, as written."""
    found, fenced = [], False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6}\s+(.+?)\s*#*$", line)):
            found.append(match.group(1))
    return tuple(found)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor of ``page``, a repeated heading's ``-1``, ``-2``... included."""
    seen: dict[str, int] = {}
    found = set()
    for heading in headings(page):
        base = anchor(heading)
        found.add(f"{base}-{seen[base]}" if base in seen else base)
        seen[base] = seen.get(base, 0) + 1
    return found


def plain(heading: str) -> str:
    """A heading as prose cites it: no backticks, no emphasis."""
    return re.sub(r"[`*]", "", heading)


def flattened(path: Path) -> str:
    """The text with its line breaks (and a comment's ``#`` after one) read as spaces: a
    citation may run over lines."""
    return re.sub(r"\s*\n\s*(?:#\s*)?", " ", path.read_text())


def broken_references(path: Path) -> list[str]:
    """``file: reference`` for each citation in ``path`` of a page or section that is not."""
    text = flattened(path)
    broken = []
    for match in LINK.finditer(text):
        target, name = (match.group(1), match.group(2)) if match.group(1) else match.group(3, 4)
        page = (path.parent / target) if match.group(1) else ROOT / target
        if not page.is_file() or name not in anchors(page.resolve()):
            broken.append(f"{target}#{name}")
    for match in NAMED.finditer(text):
        page = ROOT / match.group(1)
        for title in re.findall(QUOTE, match.group(2)):
            title = title.rstrip(" …").rstrip(".")
            if not page.is_file() or not any(plain(h).startswith(title)
                                             for h in headings(page)):
                broken.append(f'{match.group(1)}, "{title}"')
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return [f"{shown}: {reference}" for reference in broken]


def test_item2_the_reference_reader_finds_each_form(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Top\n\n## The workers' malloc: counts (§4)\n\n```\n# not a heading\n```\n"
                    "## Top\n")
    assert anchors(page) == {"top", "the-workers-malloc-counts-4", "top-1"}
    assert headings(page) == ("Top", "The workers' malloc: counts (§4)", "Top")
    source = tmp_path / "source.py"
    source.write_text('# see docs/privacy.md, "No such\n# section" and (docs/privacy.md#nope)\n')
    assert broken_references(source) == [f"{source}: docs/privacy.md#nope",
                                         f'{source}: docs/privacy.md, "No such section"']


def test_item2_no_reference_to_a_section_that_does_not_exist():
    broken = [reference for path in SOURCES for reference in broken_references(path)]
    assert not broken, ("references to a page or a section that does not exist (fix the "
                        "reference, or name the section where it now is): " + "; ".join(broken))
