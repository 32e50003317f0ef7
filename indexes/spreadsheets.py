"""Spreadsheets (.xlsx) as tables: each worksheet that holds cells is one table of the catalog.

Read with openpyxl (the maintained reader of the Office Open XML spreadsheet format, pure
Python, no network) in read-only mode, which streams a sheet's rows instead of building the
workbook in memory. A workbook is untrusted: its archive is refused by what its directory
declares before anything is inflated (the bounds of indexes/extract/docx_text.py: parts,
inflated bytes, XML bytes), and a sheet past MAX_ROWS rows or MAX_COLUMNS columns is refused.

A sheet's first row that holds a value is its header (a blank header cell is `column_N`, a
repeated name gets `_2`, `_3`); rows with no value are left out, and so are columns with
neither a header nor a value. A column's type is what its cells hold: whole numbers BIGINT,
numbers DOUBLE, dates DATE (date-times at midnight too), other date-times TIMESTAMP,
booleans BOOLEAN; a column that mixes kinds, or holds text, is VARCHAR (numbers and dates
written as text), which a table's sidecar can still declare otherwise. A formula cell holds
the value the spreadsheet program last computed (`data_only`); a workbook never opened in one
has none, and such cells are empty.
"""

from __future__ import annotations

import datetime as dt
import zipfile
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import pyarrow as pa

from indexes.extract.grids import header_names
from indexes.extract.zip_bounds import check_archive
from indexes.extract.record import BadFile
from indexes.source_files import open_regular
from retrieval.errors import IngestError

MAX_ROWS = 1_000_000  # Excel's own limit is 1,048,576
MAX_COLUMNS = 1_000


def _workbook(f: BinaryIO, where: str) -> Any:
    import openpyxl

    try:
        with zipfile.ZipFile(f) as archive:
            check_archive(archive.infolist())
        f.seek(0)
        return openpyxl.load_workbook(f, read_only=True, data_only=True)
    except BadFile as e:
        raise IngestError(f"{e.reason}: {e.message}", where) from None
    except Exception as e:  # openpyxl and zipfile raise many types on a file that is no workbook
        raise IngestError(f"not a readable .xlsx workbook: {type(e).__name__}: {str(e)[:200]}", where) from None


def sheet_names(path: Path) -> list[str]:
    """The workbook's worksheets that hold at least one value, in workbook order."""
    with open_regular(path) as f:
        book = _workbook(f, str(path))
        try:
            return [ws.title for ws in book.worksheets if any(_values(ws.iter_rows(values_only=True)))]
        finally:
            book.close()


def read_sheet(path: Path, sheet: str) -> pa.Table:
    """One worksheet as a typed Arrow table (see the module docstring)."""
    where = f"{path} (sheet {sheet!r})"
    with open_regular(path) as f:
        book = _workbook(f, str(path))
        try:
            if sheet not in book.sheetnames:
                raise IngestError("the sheet is gone (the file changed during the ingest)", where)
            rows = _values(book[sheet].iter_rows(values_only=True))
            header = next(rows, None)
            if header is None:
                raise IngestError("the sheet holds no value", where)
            body = []
            for n, row in enumerate(rows, start=1):
                if n > MAX_ROWS:
                    raise IngestError(f"the sheet has more than {MAX_ROWS:,} rows", where)
                body.append(row)
        finally:
            book.close()
    width = max([len(header), *(len(r) for r in body)])
    used = [i for i in range(width) if _at(header, i) is not None or any(_at(r, i) is not None for r in body)]
    if len(used) > MAX_COLUMNS:
        raise IngestError(f"the sheet has {len(used)} columns, over {MAX_COLUMNS}", where)
    names = _names([_at(header, i) for i in used])
    columns = {name: _column([_at(r, i) for r in body]) for name, i in zip(names, used, strict=True)}
    return pa.table(columns)


def _values(rows: Iterator[tuple[Any, ...]]) -> Iterator[tuple[Any, ...]]:
    """The rows that hold a value (a cell of spaces holds none)."""
    for row in rows:
        if any(v is not None and not (isinstance(v, str) and not v.strip()) for v in row):
            yield row


def _at(row: tuple[Any, ...], i: int) -> Any:
    value = row[i] if i < len(row) else None
    return None if isinstance(value, str) and not value.strip() else value


def _names(header: list[Any]) -> list[str]:
    return header_names([" ".join(str(cell).split()) if cell is not None else None for cell in header])


def _column(values: list[Any]) -> pa.Array:
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return pa.array(values, type=pa.bool_())
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return pa.array(values, type=pa.int64())
    if present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return pa.array([None if v is None else float(v) for v in values], type=pa.float64())
    if present and all(isinstance(v, (dt.date, dt.datetime)) for v in present):
        if all(not isinstance(v, dt.datetime) or v.time() == dt.time() for v in present):
            return pa.array([v.date() if isinstance(v, dt.datetime) else v for v in values], type=pa.date32())
        return pa.array([v if isinstance(v, dt.datetime) or v is None else dt.datetime.combine(v, dt.time())
                         for v in values], type=pa.timestamp("us"))
    return pa.array([None if v is None else _text(v) for v in values], type=pa.string())


def _text(value: Any) -> str:
    if isinstance(value, (dt.date, dt.datetime, dt.time)):
        return value.isoformat()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
