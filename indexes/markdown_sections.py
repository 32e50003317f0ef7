"""A Markdown document's heading paths, as regions of its text: what a PDF's outline or a Word
file's heading styles give the other formats, so a passage of a Markdown note names its section.

Pure, one pass over the lines, by CommonMark's block rules as far as headings need them: ATX
headings (`#` to `######`, up to three spaces in, an optional closing run of `#`), setext
headings (one line of text underlined by `===` or `---`), and nothing inside a fenced code
block (a `# comment` in a shell sample is not a heading). The text is never changed: regions
are offsets into it, and a chunk never crosses one (indexes/chunking.py).
"""

from __future__ import annotations

import re
from typing import Iterator

from retrieval.types import Region

_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*")
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_BLOCK_START = re.compile(r" {0,3}(?:[-+*>]|\d{1,9}[.)]|#|`{3}|~{3})(?:[ \t]|$)")  # a line that starts no paragraph text


def heading_text(raw: str) -> str:
    """A heading as read: links as their text, emphasis and code marks dropped, spaces collapsed."""
    text = _LINK.sub(r"\1", raw)
    text = re.sub(r"(?<!\w)[*_`]+|[*_`]+(?!\w)", "", text)
    return " ".join(text.split())


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """(offset, line without its line break) of every line."""
    start = 0
    for line in text.splitlines(keepends=True):
        yield start, line.rstrip("\r\n")
        start += len(line)


def headings(text: str) -> list[tuple[int, int, str]]:
    """(offset of the heading's first line, level 1..6, its text) of every heading, in order."""
    found: list[tuple[int, int, str]] = []
    fence: str | None = None
    previous: tuple[int, str] | None = None  # the line before, when it could be a setext heading's text
    before_previous_blank = True
    for offset, line in _lines(text):
        if fence is not None:
            closed = line.strip().startswith(fence) and set(line.strip()) == {fence[0]}
            if closed:
                fence = None
            previous, before_previous_blank = None, closed
            continue
        opened = _FENCE.match(line)
        if opened:
            fence = opened.group(1)
            previous, before_previous_blank = None, False
            continue
        atx = _ATX.fullmatch(line)
        underline = _SETEXT.fullmatch(line)
        if atx:
            name = heading_text(atx.group(2) or "")
            if name:
                found.append((offset, len(atx.group(1)), name))
            previous, before_previous_blank = None, True
            continue
        if underline and previous is not None and before_previous_blank:
            name = heading_text(previous[1])
            if name:
                found.append((previous[0], 1 if underline.group(1)[0] == "=" else 2, name))
                previous, before_previous_blank = None, True
                continue
        if underline:  # a thematic break (`---`), or a rule no text stands over
            previous, before_previous_blank = None, True
            continue
        blank = not line.strip()
        if blank:
            previous, before_previous_blank = None, True
        elif previous is None and before_previous_blank and not _BLOCK_START.match(line) and not line.startswith("    "):
            previous = (offset, line)  # a paragraph's first line: a setext heading's text if underlined next
        else:
            previous, before_previous_blank = None, False
    return found


def markdown_regions(text: str) -> tuple[Region, ...]:
    """One region per heading's section (the heading line and what follows it up to the next
    heading), its path the stack of headings above it; text before the first heading has the
    path (). A document without headings has no regions (it is chunked as a whole)."""
    marks = headings(text)
    if not marks:
        return ()
    regions: list[Region] = []
    stack: list[tuple[int, str]] = []
    bounds = [(0, None)] + [(offset, (level, name)) for offset, level, name in marks]
    for i, (start, mark) in enumerate(bounds):
        if mark is not None:
            level, name = mark
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, name))
        end = bounds[i + 1][0] if i + 1 < len(bounds) else len(text)
        while end > start and text[end - 1].isspace():
            end -= 1
        if end > start:
            regions.append(Region(start, end, section=tuple(n for _, n in stack)))
    return tuple(regions)
