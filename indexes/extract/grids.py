"""Tables found inside a file (a Word table, an HTML `<table>`, aligned or ruled columns of a
PDF page) as grids of cell text, how a grid reads in the document's text, and its typed columns.

A grid is what the extractor saw: rows of cell text, the header row when the table has one,
and where it sits (PDF page, heading path). The ingest makes each grid a table of the catalog
(indexes/tables.py, which types its columns by `typed_cells`) and the document's text keeps a
readable rendering, one row per line with its headers, so the text routes find the same facts.

The header is the first row when the file marks it as one (`<th>` cells, a repeated Word
header row) or, unmarked, when every cell of it holds text that is no number or date while a
row below holds a number or date in that column, or every column's first cell differs from
the rest of its cells in kind (a key-value table is then read without a header).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence


MAX_GRID_CELLS = 200_000  # cells of one table (a bigger table is read as text only)
MAX_FILE_TABLES = 200  # tables one file gives the catalog; the rest are read as text only
MAX_CELL_CHARS = 2_000
MAX_COLUMNS = 200
_INT = re.compile(r"[-+−]?\d{1,3}(?:,\d{3})+|[-+−]?\d+")
_FLOAT = re.compile(r"[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+)\.\d+|[-+−]?\.\d+")
_CURRENCY = "€$£¥₹"
_ISO = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_MONTHS = {m: i for i, m in enumerate(("january", "february", "march", "april", "may", "june", "july", "august",
                                       "september", "october", "november", "december"), start=1)}
_DAY_MONTH = re.compile(r"(\d{1,2})\s+([A-Za-z]+)\s+(\d{4})")
_MONTH_DAY = re.compile(r"([A-Za-z]+)\s+(\d{1,2}),?\s+(\d{4})")


@dataclass(frozen=True)
class Grid:
    """One table of a file: `header` (empty when it has none) and the body rows, every row as
    wide as the widest; `number` counts the file's tables from 1 in reading order."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    number: int = 0
    page: int | None = None
    section: tuple[str, ...] = ()

    def to_json(self) -> list:
        return [list(self.header), [list(r) for r in self.rows], self.number, self.page, list(self.section)]

    @classmethod
    def from_json(cls, value: list) -> Grid:
        header, rows, number, page, section = value
        return cls(tuple(map(str, header)), tuple(tuple(map(str, r)) for r in rows), int(number),
                   int(page) if page is not None else None, tuple(map(str, section)))


@dataclass(frozen=True)
class FoundGrids:
    """The tables an ingest found inside one document file, with that document's id, title and ACL."""

    path: Path
    doc_id: str
    title: str | None
    acl: tuple[str, ...]
    grids: tuple[Grid, ...]


def grid_of(cells: Sequence[Sequence[str]], header_marked: bool = False) -> Grid | None:
    """A grid from rows of cell text (None when it is no table: fewer than two columns or no
    body row once empty rows and columns are left out, or past the bounds)."""
    rows = [[" ".join(c.split())[:MAX_CELL_CHARS] for c in row] for row in cells]
    rows = [r for r in rows if any(r)]
    if not rows:
        return None
    width = max(len(r) for r in rows)
    if width > MAX_COLUMNS or width * len(rows) > MAX_GRID_CELLS:
        return None
    rows = [r + [""] * (width - len(r)) for r in rows]
    used = [i for i in range(width) if any(r[i] for r in rows)]
    rows = [[r[i] for i in used] for r in rows]
    if len(used) < 2 or len(rows) < 2:
        return None
    header: list[str] = []
    if header_marked or _looks_like_header(rows):
        header, rows = rows[0], rows[1:]
    return Grid(tuple(header), tuple(tuple(r) for r in rows))


def _looks_like_header(rows: list[list[str]]) -> bool:
    first, body = rows[0], rows[1:]
    if not all(first) or len(set(first)) < len(first) or any(_kind(c) != "text" for c in first):
        return False
    typed_below = any(any(_kind(r[i]) != "text" for r in body if r[i]) for i in range(len(first)))
    return typed_below or all(len(c) <= 40 for c in first) and len(body) >= 2 and not _key_value(rows)


def _key_value(rows: list[list[str]]) -> bool:
    """Two columns whose left cells are all short labels: a key-value table, read without a header."""
    return len(rows[0]) == 2 and all(r[0] and len(r[0]) <= 40 and r[0].endswith(":") for r in rows)


def render(grid: Grid) -> list[str]:
    """The grid's lines in the document's text: each body row with its headers
    ("Part: M8 bolt | Torque (Nm): 25"), or its cells joined when the table has no header."""
    if not grid.header:
        return [" | ".join(c for c in row if c) for row in grid.rows if any(row)]
    lines = []
    for row in grid.rows:
        cells = [f"{h}: {c}" if h else c for h, c in zip(grid.header, row, strict=True) if c]
        if cells:
            lines.append(" | ".join(cells))
    return lines


def header_names(header: Sequence[str | None]) -> list[str]:
    """Header cells as column names: a blank one `column_N` (N from 1), a repeated one `_2`,
    `_3` (a spreadsheet's header row and a file table's alike)."""
    out: list[str] = []
    for i, cell in enumerate(header, start=1):
        base = cell if cell else f"column_{i}"
        name, n = base, 1
        while name in out:
            n += 1
            name = f"{base}_{n}"
        out.append(name)
    return out


def column_names(grid: Grid) -> list[str]:
    """A grid's header as column names (`header_names`; a double quote, which no column name
    holds, as a single one); `column_1..N` for a table without a header."""
    width = len(grid.rows[0]) if grid.rows else len(grid.header)
    return header_names([grid.header[i].replace('"', "'") if i < len(grid.header) else None for i in range(width)])


def typed_cells(cells: list[str]) -> tuple[str, list]:
    """A column's cells as typed values and their kind: `int` when every non-empty cell is a
    whole number, `float` a number (thousands separators and a currency sign dropped, an amount
    in parentheses negative), `date` a date (ISO, "3 March 2025", "March 3, 2025"); else
    `text`, cells as written. An empty cell is None."""
    present = [c for c in cells if c]
    kinds = {_kind(c) for c in present}
    if present and kinds == {"int"}:
        return "int", [_number(c, int) if c else None for c in cells]
    if present and kinds <= {"int", "float"}:
        return "float", [_number(c, float) if c else None for c in cells]
    if present and kinds == {"date"}:
        return "date", [_date(c) if c else None for c in cells]
    return "text", [c or None for c in cells]


def _bare(cell: str) -> str:
    """A cell without a currency sign before or after its number ("€ 1,200", "1,200 €"), and
    an accountant's negative in parentheses as a minus ("(640,200)")."""
    bare = cell.strip().strip(_CURRENCY).strip()
    if len(bare) > 2 and bare[0] == "(" and bare[-1] == ")":
        bare = "-" + bare[1:-1].strip().strip(_CURRENCY).strip()
    return bare


def _kind(cell: str) -> str:
    bare = _bare(cell)
    if _INT.fullmatch(bare):
        return "int"
    if _FLOAT.fullmatch(bare):
        return "float"
    return "date" if _date(cell) is not None else "text"


def _number(cell: str, kind: type) -> int | float:
    bare = _bare(cell).replace(",", "").replace("−", "-")
    return kind(bare) if kind is int else float(bare)


def _date(cell: str) -> dt.date | None:
    text = cell.strip()
    try:
        if m := _ISO.fullmatch(text):
            return dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
        if (m := _DAY_MONTH.fullmatch(text)) and m.group(2).lower() in _MONTHS:
            return dt.date(int(m.group(3)), _MONTHS[m.group(2).lower()], int(m.group(1)))
        if (m := _MONTH_DAY.fullmatch(text)) and m.group(1).lower() in _MONTHS:
            return dt.date(int(m.group(3)), _MONTHS[m.group(1).lower()], int(m.group(2)))
    except ValueError:
        return None
    return None
