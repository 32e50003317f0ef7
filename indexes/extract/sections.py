"""Blocks of text with heading levels, joined into a document's text and heading-path regions,
and the tables among them placed under their headings (what the DOCX and HTML extractors share)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from indexes.extract.grids import MAX_FILE_TABLES, Grid
from retrieval.types import Region


@dataclass(frozen=True)
class Block:
    """A unit of text; `level` is set for a heading (0 for a title, 1..9)."""

    text: str
    level: int | None = None
    grid: Grid | None = None  # the table this block renders (its text is the grid's lines)


@dataclass(frozen=True)
class Assembled:
    text: str
    regions: tuple[Region, ...]
    tables: tuple[Grid, ...]  # numbered from 1, each with the heading path it sits under


def assemble(blocks: Iterable[Block]) -> Assembled:
    """Blocks joined by blank lines, and one region per maximal run of blocks under the same
    heading path. The path is a stack: a heading pops every heading of its level or deeper,
    and belongs to the section it opens; text before the first heading has the path ()."""
    stack: list[tuple[int, str]] = []
    parts: list[str] = []
    regions: list[Region] = []
    tables: list[Grid] = []
    offset = 0
    for block in blocks:
        text = block.text
        if not text.strip():
            continue
        if block.level is not None:
            while stack and stack[-1][0] >= block.level:
                stack.pop()
            stack.append((block.level, " ".join(text.split())))
        path = tuple(name for _, name in stack)
        if block.grid is not None and len(tables) < MAX_FILE_TABLES:
            tables.append(replace(block.grid, number=len(tables) + 1, section=path))
        start = offset + 2 if parts else 0
        if regions and regions[-1].section == path:
            regions[-1] = Region(regions[-1].start, start + len(text), section=path)
        else:
            regions.append(Region(start, start + len(text), section=path))
        parts.append(text)
        offset = start + len(text)
    return Assembled("\n\n".join(parts), tuple(regions), tuple(tables))
