"""Tables on a PDF page, found from its word boxes and ruling lines (a stream-and-lattice reading
in the manner of Tabula and Camelot, written for what pypdfium2 gives: word boxes, and the
bounds of the page's path objects).

A page's words fall into rows (boxes whose middles share a line). A row splits into cells at a
horizontal gap of at least CELL_GAP line heights, or at a vertical rule (a thin path, or the
side of a drawn cell box) between two words: ruled tables set cells closer than whitespace
alone would tell. A table is a run of at least MIN_ROWS consecutive rows, no more than
ROW_GAP line heights apart, each of two cells or more and in line with the rows above it
(`_aligned`), whose cells, pooled, stand in two or
more columns (`_columns`) with every cell in one of them; short cells (MAX_CELL_WORDS words
on average), few of which end a sentence (columns of prose, however narrow, are no table),
and no list (a first column of bullets or item numbers).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol, Sequence

from indexes.extract.grids import Grid, grid_of

CELL_GAP = 0.45  # line heights of whitespace that separate two cells of a row (a word space is about 0.25)
ROW_GAP = 2.0  # line heights between two rows of one table, at most
MIN_ROWS = 3
MAX_CELL_WORDS = 4.0
RULE_WIDTH = 2.0  # points: a path this thin is a rule
MAX_RULES = 20_000  # path objects read per page (a drawing has more; its tables are read from whitespace)
PROSE_SHARE = 0.1  # cells that end a sentence, past this share of a run: columns of text, not a table
_SENTENCE_END = re.compile(r"[a-z][.!?](?:\s+[A-Z]|$)")
_LIST_MARK = re.compile(r"[•◦▪‣∙·*–-]|\(?[0-9]{1,3}[.)]|\(?[a-z][.)]|\(?[ivx]{1,4}[.)]", re.IGNORECASE)


class WordBox(Protocol):
    text: str
    x0: float
    top: float
    x1: float
    bottom: float


@dataclass(frozen=True)
class Found:
    """A table on the page: the words it is made of (their indices), its grid, its box."""

    words: tuple[int, ...]
    grid: Grid
    x0: float
    top: float
    x1: float
    bottom: float


@dataclass
class _Cell:
    x0: float
    x1: float
    words: list[int]


Rule = tuple[float, float, float]  # a vertical rule or cell side: x, top, bottom (points, top-down)


def find_tables(words: Sequence[WordBox], line_height: float, rules: Sequence[Rule] = ()) -> list[Found]:
    """The tables among `words` (see the module docstring); `rules` are the page's vertical
    rules and cell sides."""
    rows = _rows(words)
    celled = [_cells(words, row, line_height, rules) for row in rows]
    found: list[Found] = []
    run: list[int] = []
    for i in range(len(rows) + 1):
        fits = i < len(rows) and len(celled[i]) >= 2 and (
            not run or _top(words, rows[i]) - _bottom(words, rows[run[-1]]) <= ROW_GAP * line_height
            and _aligned(_columns([celled[r] for r in run]), celled[i]))
        if fits:
            run.append(i)
            continue
        found += _table(words, [rows[r] for r in run], [celled[r] for r in run])
        run = [i] if i < len(rows) and len(celled[i]) >= 2 else []
    return found


def _aligned(columns: list[tuple[float, float]], cells: list[_Cell]) -> bool:
    """Does a row continue the table: none of its cells straddles two of the table's columns,
    and no two share one (a line of prose, justified or not, does neither)?"""
    taken: list[int] = []
    for c in cells:
        over = [k for k, (x0, x1) in enumerate(columns) if c.x0 < x1 and x0 < c.x1]
        if len(over) > 1:
            return False
        taken += over
    return len(taken) == len(set(taken))


def _rows(words: Sequence[WordBox]) -> list[list[int]]:
    """Word indices by line, top to bottom: a word joins the line its middle falls inside."""
    order = sorted(range(len(words)), key=lambda i: (words[i].top + words[i].bottom) / 2)
    rows: list[list[int]] = []
    reach = float("-inf")
    for i in order:
        middle = (words[i].top + words[i].bottom) / 2
        if not rows or middle > reach:
            rows.append([])
            reach = words[i].bottom
        rows[-1].append(i)
        reach = max(reach, min(words[i].bottom, middle + (words[i].bottom - words[i].top) / 2))
    return [sorted(r, key=lambda i: words[i].x0) for r in rows]


def _cells(words: Sequence[WordBox], row: list[int], line_height: float, rules: Sequence[Rule]) -> list[_Cell]:
    top, bottom = _top(words, row), _bottom(words, row)
    near = [x for x, r_top, r_bottom in rules if r_top < bottom and top < r_bottom]  # rules beside this row
    cells: list[_Cell] = []
    for i in row:
        w = words[i]
        if cells:
            last = cells[-1]
            gap = w.x0 - last.x1
            ruled = any(last.x1 <= x <= w.x0 for x in near)
            if gap < CELL_GAP * line_height and not ruled:
                last.x1 = max(last.x1, w.x1)
                last.words.append(i)
                continue
        cells.append(_Cell(w.x0, w.x1, [i]))
    return cells


def _top(words: Sequence[WordBox], row: list[int]) -> float:
    return min(words[i].top for i in row)


def _bottom(words: Sequence[WordBox], row: list[int]) -> float:
    return max(words[i].bottom for i in row)


def _table(words: Sequence[WordBox], rows: list[list[int]], celled: list[list[_Cell]]) -> list[Found]:
    if len(rows) < MIN_ROWS:
        return []
    columns = _columns(celled)
    if len(columns) < 2:
        return []
    grid_rows: list[list[str]] = []
    for cells in celled:
        row = [""] * len(columns)
        for cell in cells:
            at = next(k for k, (x0, x1) in enumerate(columns) if x0 <= cell.x0 and cell.x1 <= x1)
            if row[at]:
                return []  # two cells of one row in one column: not aligned like a table
            row[at] = " ".join(words[i].text for i in cell.words)
        grid_rows.append(row)
    cells_all = [c for cells in celled for c in cells]
    if sum(len(c.words) for c in cells_all) / len(cells_all) > MAX_CELL_WORDS:
        return []
    texts = [cell for row in grid_rows for cell in row if cell]
    if sum(bool(_SENTENCE_END.search(t)) for t in texts) > PROSE_SHARE * len(texts):
        return []  # columns of prose, however narrow: their lines end sentences
    firsts = [r[0] for r in grid_rows[1:] if r[0]]
    if firsts and all(_LIST_MARK.fullmatch(f) for f in firsts):
        return []
    grid = grid_of(grid_rows)
    if grid is None:
        return []
    used = tuple(i for row in rows for i in row)
    return [Found(used, grid, min(words[i].x0 for i in used), min(words[i].top for i in used),
                  max(words[i].x1 for i in used), max(words[i].bottom for i in used))]


def _columns(celled: list[list[_Cell]]) -> list[tuple[float, float]]:
    """The table's columns, left to right: the cells' x-extents merged where they overlap, then
    two neighbours merged where no row has a cell in both (a header set flush left over figures
    set flush right stands apart from them, yet heads their column)."""
    spans = sorted((c.x0, c.x1) for cells in celled for c in cells)
    merged: list[list[float]] = []
    for x0, x1 in spans:
        if merged and x0 <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], x1)
        else:
            merged.append([x0, x1])

    def used(span: list[float]) -> set[int]:
        return {r for r, cells in enumerate(celled) for c in cells if span[0] <= c.x0 and c.x1 <= span[1]}

    out = [merged[0]] if merged else []
    for span in merged[1:]:
        if not used(out[-1]) & used(span):
            out[-1] = [out[-1][0], span[1]]
        else:
            out.append(span)
    return [(a, b) for a, b in out]


def vertical_rules(bounds: Sequence[tuple[float, float, float, float]], page_top: float) -> list[Rule]:
    """Vertical rules and cell sides from path objects' bounds (left, bottom, right, top in PDF
    space): a thin path's middle, and both sides of a box (a cell drawn as a rectangle)."""
    out: list[Rule] = []
    for left, bottom, right, top in bounds:
        span = (page_top - top, page_top - bottom)
        if right - left <= RULE_WIDTH:
            out.append(((left + right) / 2, *span))
        elif top - bottom > RULE_WIDTH:
            out += [(left, *span), (right, *span)]
    return out
