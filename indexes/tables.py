"""CSV and Parquet files, and each worksheet of an .xlsx workbook (indexes/spreadsheets.py),
become DuckDB tables (schema `data`) in the snapshot catalog.

A table is named after its file (lower case, non-alphanumerics to `_`); a workbook's sheets
after the file and the sheet (`fleet_defects`), unless it has one sheet. Its table-level ACL
comes from a sidecar `<name>.acl.json` (`{"acl": [...]}`) beside the file, else the ingest
default. A column named `acl` is a row-level ACL: each cell a JSON list (or a list column in
Parquet) validated like a document ACL; the service filters rows by it and never returns it.

Table files are found as documents are (indexes/source_files.py: no link inside a source
folder is followed); the file and its sidecar are opened as regular files without following
a link, and DuckDB reads the file through that open descriptor.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

import duckdb
import pyarrow as pa

from indexes.extract.grids import MAX_FILE_TABLES, FoundGrids, Grid, column_names, typed_cells
from indexes.source_files import open_regular, read_regular
from indexes.spreadsheets import read_sheet, sheet_names
from retrieval.errors import IngestError, InvalidRequest
from retrieval.sql.schema import ColumnInfo, TableInfo
from retrieval.text import STOPWORDS, stem
from retrieval.types import check_acl, valid_acl_entry

_NAME_OK = re.compile(r"[a-z][a-z0-9_]{0,62}")
_COLUMN_OK = re.compile(r'[^"\x00-\x1f\x7f]+')  # the SQL the service writes quotes column names
SIDECAR_FIELDS = {"acl", "types", "key", "description", "aliases", "columns", "sheets"}
SHEET_FIELDS = {"types", "key", "description", "aliases", "columns"}  # what a workbook's sidecar may say per sheet
MAX_DESCRIPTION = 500  # characters of a table's or a column's description
MAX_ALIASES = 16  # aliases per table or column, each at most MAX_ALIAS characters
MAX_ALIAS = 64
MAX_SIDECAR_BYTES = 1 << 20
MAX_GRID_TABLES = 20_000  # tables inside document files one index holds (each is a DuckDB table)
# Column types a sidecar may declare (so no row, readable or not, decides them by inference).
_DECLARED_TYPE = re.compile(r"VARCHAR|TEXT|BOOLEAN|TINYINT|SMALLINT|INTEGER|BIGINT|HUGEINT|FLOAT|REAL|DOUBLE|DATE|TIMESTAMP"
                            r"|TIMESTAMPTZ|DECIMAL\(\d{1,2}, ?\d{1,2}\)", re.I)


@dataclass(frozen=True)
class TableSource:
    name: str
    path: Path
    acl: tuple[str, ...]
    types: tuple[tuple[str, str], ...] = ()  # declared (column, type) pairs from the sidecar
    key: str | None = None  # declared key column
    description: str = ""
    aliases: tuple[str, ...] = ()
    columns: tuple[tuple[str, str, tuple[str, ...]], ...] = ()  # (column, description, aliases) from the sidecar
    sheet: str | None = None  # the worksheet of an .xlsx workbook this table is
    grid: Grid | None = field(default=None, compare=False)  # a table inside a PDF, DOCX or HTML file: its cells
    owner: str | None = None  # the document whose file holds `grid`: the table lives and dies with it

    @property
    def origin(self) -> str:
        """Where the rows come from, as answers cite it: the file, the sheet of a workbook, the
        table of a document file (numbered in reading order)."""
        if self.grid is not None:
            return f"{self.path}#table-{self.grid.number}"
        return str(self.path) if self.sheet is None else f"{self.path}#{self.sheet}"


def grid_tables(found: Sequence[FoundGrids], taken: Sequence[str] = ()) -> list[TableSource]:
    """Each table inside a document file as a table of the catalog, named after its file and
    number (`torque_manual_table_2`, then `_2`, `_3` where that name is taken). Its ACL is the
    document's; its description says where it is (the document, page, section), and the
    heading it sits under is its alias (`_records_named`), so that a question in the
    document's words links to it."""
    used = set(taken)
    out: list[TableSource] = []
    for f in sorted(found, key=lambda f: str(f.path)):
        if len(out) + len(f.grids) > MAX_GRID_TABLES:
            raise IngestError(f"the files hold more than {MAX_GRID_TABLES:,} tables (at most {MAX_FILE_TABLES} are read from "
                              "one file); split the sources into several indexes", str(f.path))
        stem = re.sub(r"[^a-z0-9_]+", "_", f.path.stem.lower()).strip("_")[:40] or "file"
        stem = stem if stem[0].isalpha() else f"t_{stem}"
        for g in f.grids:
            base = name = f"{stem}_table_{g.number}"
            n = 1
            while name in used:
                n += 1
                name = f"{base}_{n}"
            used.add(name)
            where = [f"table {g.number} of {f.title or f.path.name}"]
            if g.page is not None:
                where.append(f"page {g.page}")
            if g.section:
                where.append("section " + " > ".join(g.section))
            heading = _records_named(g) if g.section else None
            out.append(TableSource(name, f.path, f.acl, description=", ".join(where)[:MAX_DESCRIPTION],
                                   aliases=(heading,) if heading else (), grid=g, owner=f.doc_id))
    return out


def table_name(path: Path) -> str:
    name = re.sub(r"[^a-z0-9_]+", "_", path.stem.lower()).strip("_")
    if not _NAME_OK.fullmatch(name):
        raise IngestError("cannot derive a table name (it must start with a letter)", str(path))
    return name


def plan_tables(paths: Sequence[Path], default_acl: tuple[str, ...]) -> list[TableSource]:
    """Names and table ACLs of the table files (a workbook's: of each sheet); errors name the file."""
    out: dict[str, TableSource] = {}
    for path in paths:
        for src in _plan_file(path, default_acl):
            if src.name in out:
                raise IngestError(f"two files or sheets map to table {src.name!r} (also {out[src.name].origin})",
                                  src.origin)
            out[src.name] = src
    return list(out.values())


def _plan_file(path: Path, default_acl: tuple[str, ...]) -> list[TableSource]:
    name = table_name(path)
    whole = _plan_one(path, name, default_acl)
    if path.suffix.lower() != ".xlsx":
        if whole.sheet_notes:
            raise IngestError('"sheets" is for a workbook (.xlsx) only', str(whole.sidecar))
        return [whole.source]
    sheets = sheet_names(path)
    if not sheets:
        raise IngestError("the workbook has no sheet holding a value", str(path))
    unknown = sorted(set(whole.sheet_notes) - set(sheets))
    if unknown:
        raise IngestError(f'"sheets" names {unknown[0]!r}, which is no sheet holding a value of the workbook '
                          f"(its sheets: {', '.join(sheets)})", str(whole.sidecar))
    out = []
    for sheet in sheets:
        table = name if len(sheets) == 1 else f"{name}_{_part(sheet)}"
        if not _NAME_OK.fullmatch(table):
            raise IngestError(f"cannot derive a table name from sheet {sheet!r}", str(path))
        notes = whole.sheet_notes.get(sheet, {})
        src = whole.source
        if notes:
            where = f"{whole.sidecar} (sheet {sheet!r})"
            types, key = _declared({"types": dict(src.types), "key": src.key, **notes}, where)
            description, aliases = _notes({"description": src.description, "aliases": list(src.aliases), **notes}, where,
                                          "the sheet")
            columns = _column_notes(notes.get("columns", {}), where) if "columns" in notes else src.columns
            src = TableSource(src.name, path, src.acl, types, key, description, aliases, columns)
        out.append(replace(src, name=table, sheet=sheet))
    return out


def _part(sheet: str) -> str:
    return re.sub(r"[^a-z0-9_]+", "_", sheet.lower()).strip("_")


@dataclass(frozen=True)
class _Planned:
    source: TableSource
    sidecar: Path
    sheet_notes: dict[str, dict]


def _plan_one(path: Path, name: str, default_acl: tuple[str, ...]) -> _Planned:
    """The file's table, named `name`, with what its sidecar says (a workbook's per-sheet notes aside)."""
    sidecar = path.with_name(f"{path.stem}.acl.json")
    acl = default_acl
    if os.path.lexists(sidecar):
        try:
            meta = json.loads(read_regular(sidecar, MAX_SIDECAR_BYTES).decode("utf-8"))
        except OSError as e:
            raise IngestError(f"unreadable ACL sidecar: {e.strerror}", str(sidecar)) from None
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise IngestError(f"unreadable ACL sidecar: {e}", str(sidecar)) from None
        if not isinstance(meta, dict) or set(meta) - SIDECAR_FIELDS or "acl" not in meta:
            raise IngestError('a sidecar holds {"acl": [...]} and optionally "types": {column: type}, "key": column, '
                              '"description": text, "aliases": [names], "columns": {column: {"description", "aliases"}} and, '
                              'for a workbook, "sheets": {sheet: {those per sheet}}',
                              str(sidecar))
        try:
            acl = check_acl(meta["acl"])
        except InvalidRequest as e:
            raise IngestError(e.message, str(sidecar)) from None
        types, key = _declared(meta, str(sidecar))
        description, aliases = _notes(meta, str(sidecar), "the table")
        columns = _column_notes(meta.get("columns", {}), str(sidecar))
        return _Planned(TableSource(name, path, acl, types, key, description, aliases, columns), sidecar,
                        _sheet_notes(meta.get("sheets", {}), str(sidecar)))
    return _Planned(TableSource(name, path, acl), sidecar, {})


def _sheet_notes(sheets: object, where: str) -> dict[str, dict]:
    if not isinstance(sheets, dict) or not all(isinstance(v, dict) and not set(v) - SHEET_FIELDS for v in sheets.values()):
        raise IngestError(f'"sheets" maps sheet names to {{{", ".join(sorted(SHEET_FIELDS))}}}', where)
    return {str(k): v for k, v in sheets.items()}


def _declared(meta: dict, where: str) -> tuple[tuple[tuple[str, str], ...], str | None]:
    types = meta.get("types", {})
    if not isinstance(types, dict) or not all(isinstance(c, str) and isinstance(t, str) and _DECLARED_TYPE.fullmatch(t.strip())
                                              for c, t in types.items()):
        raise IngestError('"types" maps column names to DuckDB types such as "DOUBLE", "BIGINT", "DATE" or "VARCHAR"', where)
    key = meta.get("key")
    if key is not None and not isinstance(key, str):
        raise IngestError('"key" names one column', where)
    return tuple(sorted((c, t.strip().upper()) for c, t in types.items())), key


def _notes(meta: dict, where: str, what: str) -> tuple[str, tuple[str, ...]]:
    """A description and aliases of a table or a column: what a team calls it, for linking
    questions to it when its name does not say it. Bounded, so a sidecar cannot make every
    question's linking slow."""
    description, aliases = meta.get("description", ""), meta.get("aliases", [])
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
        raise IngestError(f'"description" of {what} is text of at most {MAX_DESCRIPTION} characters', where)
    if (not isinstance(aliases, list) or len(aliases) > MAX_ALIASES
            or not all(isinstance(a, str) and a.strip() and len(a) <= MAX_ALIAS for a in aliases)):
        raise IngestError(f'"aliases" of {what} is a list of at most {MAX_ALIASES} names of at most {MAX_ALIAS} characters',
                          where)
    return " ".join(description.split()), tuple(" ".join(a.split()) for a in aliases)


def _column_notes(columns: object, where: str) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    if not isinstance(columns, dict):
        raise IngestError('"columns" maps column names to {"description": text, "aliases": [names]}', where)
    out = []
    for col, meta in columns.items():
        if not isinstance(meta, dict) or set(meta) - {"description", "aliases"}:
            raise IngestError(f'"columns"."{str(col)[:80]}" holds "description" and "aliases" only', where)
        out.append((str(col), *_notes(meta, where, f"column {str(col)[:80]!r}")))
    return tuple(sorted(out))


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in `path` durable (the directory entry, not only the data)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """Make every file under `root` and every directory entry in it durable: what a snapshot
    needs before CURRENT may name it (and before the log records it holds are dropped)."""
    for path in sorted(root.rglob("*")):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    for directory in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        fsync_dir(directory)
    fsync_dir(root)


def load_tables(con: duckdb.DuckDBPyConnection, sources: Sequence[TableSource]) -> list[TableInfo]:
    """Create `data.<name>` for each source inside the caller's transaction."""
    infos = []
    for src in sources:
        if src.grid is not None:
            _load_grid(con, src)
        elif src.sheet is not None:
            _load_sheet(con, src)
        else:
            _load_file(con, src)
        columns = [ColumnInfo(n, t) for n, t, *_ in con.execute(f'DESCRIBE data."{src.name}"').fetchall()]
        names = [c.name for c in columns]
        for n in names:
            if not _COLUMN_OK.fullmatch(n):
                raise IngestError(f"column name {n[:80]!r} must be printable characters without a double quote", str(src.path))
        for col, typ in src.types:  # declared types are the table's, whatever its rows hold
            if col not in names:
                raise IngestError(f"declared type for unknown column {col!r}", str(src.path))
            try:
                con.execute(f'ALTER TABLE data."{src.name}" ALTER COLUMN "{col}" TYPE {typ}')
            except duckdb.Error as e:
                raise IngestError(f"column {col!r} does not hold {typ} values: {str(e).splitlines()[0]}", str(src.path)) from None
        if src.types:
            columns = [ColumnInfo(n, t) for n, t, *_ in con.execute(f'DESCRIBE data."{src.name}"').fetchall()]
        row_acl = "acl" in names
        if row_acl:
            _convert_row_acl(con, src, next(c for c in columns if c.name == "acl"))
            columns = [ColumnInfo(n, t) for n, t, *_ in con.execute(f'DESCRIBE data."{src.name}"').fetchall()]
        rows = con.execute(f'SELECT count(*) FROM data."{src.name}"').fetchall()[0][0]
        columns = _with_notes(src, columns)
        laid_out = src.grid is not None or src.path.suffix.lower() == ".xlsx"  # a person's table: rows called by a label
        infos.append(TableInfo(
            name=src.name, columns=tuple(columns), acl=src.acl, row_acl=row_acl,
            id_column=(_declared_key(con, src, names, rows) if src.key else _label_column(con, src.name, columns, rows)
                       if laid_out else _id_column(con, src.name, columns, rows)),
            doc_column="doc_id" if "doc_id" in names else None,
            rows=int(rows), source=src.origin, description=src.description, aliases=src.aliases, owner=src.owner,
        ))
    return infos


def _load_file(con: duckdb.DuckDBPyConnection, src: TableSource) -> None:
    reader = "read_parquet(?)" if src.path.suffix.lower() == ".parquet" else "read_csv(?, header = true, sample_size = -1)"
    try:
        with open_regular(src.path) as f:  # a file swapped for a link since it was found is refused
            opened = f"/dev/fd/{f.fileno()}"
            try:
                con.execute(f'CREATE TABLE data."{src.name}" AS SELECT * FROM {reader}', [opened])
            except duckdb.Error as e:
                raise IngestError(f"cannot load table: {str(e).splitlines()[0].replace(opened, str(src.path))}",
                                  str(src.path)) from None
    except OSError as e:
        raise IngestError(f"cannot read file: {e.strerror}", str(src.path)) from None


def _load_sheet(con: duckdb.DuckDBPyConnection, src: TableSource) -> None:
    assert src.sheet is not None
    try:
        rows = read_sheet(src.path, src.sheet)
    except OSError as e:
        raise IngestError(f"cannot read file: {e.strerror}", str(src.path)) from None
    _load_rows(con, src, rows)


_ARROW_TYPES = {"int": pa.int64(), "float": pa.float64(), "date": pa.date32(), "text": pa.string()}


def typed_table(grid: Grid) -> pa.Table:
    """A grid as a typed Arrow table: BIGINT, DOUBLE, DATE or VARCHAR columns by what every
    non-empty cell holds (indexes/extract/grids.py `typed_cells`), named by `column_names`."""
    columns = {}
    for i, name in enumerate(column_names(grid)):
        kind, values = typed_cells([row[i] for row in grid.rows])
        columns[name] = pa.array(values, type=_ARROW_TYPES[kind])
    return pa.table(columns)


def _records_named(grid: Grid) -> str | None:
    """What the heading above a table calls its rows: the heading's words less those that name
    one of its columns ("Crossings and fares" over a "Fare" column: "Crossings"), so that a
    question's "fare" still reads that column rather than naming the table."""
    columns = {w for name in column_names(grid) for w in ColumnInfo(name, "VARCHAR").words}
    kept = [w for w in grid.section[-1].split()
            if w.lower() not in STOPWORDS and not ({w.lower(), stem(w.lower()), w.lower().removesuffix("s")} & columns)]
    alias = " ".join(kept)
    return alias if 3 <= len(alias) <= MAX_ALIAS else None


def _load_grid(con: duckdb.DuckDBPyConnection, src: TableSource) -> None:
    """A table found inside a document file, each row carrying the document's id (`doc_id`):
    rows given as evidence cite the document, whose passages carry the file's page or section."""
    assert src.grid is not None
    rows = typed_table(src.grid)
    if "doc_id" not in rows.column_names and src.owner is not None:
        rows = rows.append_column("doc_id", pa.array([src.owner] * rows.num_rows, type=pa.string()))
    _load_rows(con, src, rows)


def _load_rows(con: duckdb.DuckDBPyConnection, src: TableSource, rows: pa.Table) -> None:
    view = f"quarry_rows_{src.name}"
    con.register(view, rows)
    try:
        con.execute(f'CREATE TABLE data."{src.name}" AS SELECT * FROM "{view}"')
    except duckdb.Error as e:
        raise IngestError(f"cannot load table: {str(e).splitlines()[0]}", src.origin) from None
    finally:
        con.unregister(view)


def _with_notes(src: TableSource, columns: list[ColumnInfo]) -> list[ColumnInfo]:
    """The columns with the description and aliases the sidecar gives them."""
    notes = {c: (d, a) for c, d, a in src.columns}
    names = {c.name for c in columns}
    for col in notes:
        if col not in names or (col == "acl" and "acl" in names):
            raise IngestError(f"description of unknown column {col[:80]!r}", str(src.path))
    return [ColumnInfo(c.name, c.type, *notes[c.name]) if c.name in notes else c for c in columns]


def _convert_row_acl(con: duckdb.DuckDBPyConnection, src: TableSource, col: ColumnInfo) -> None:
    """Validate every row's ACL (naming the file line) and store it as VARCHAR[]. A cell is a
    JSON list of entries, or one bare entry (`public`, `group:finance`, a principal id) read
    as a list of one; anything else (a malformed list, two bare words) stops the ingest."""
    values = [r[0] for r in con.execute(f'SELECT acl FROM data."{src.name}"').fetchall()]
    lists: list[list[str]] = []
    for i, raw in enumerate(values):
        line = i + 2 if src.path.suffix.lower() == ".csv" else i + 1  # header is line 1
        try:
            entries = _row_acl_entries(raw)
            lists.append(list(check_acl(entries)))
        except (json.JSONDecodeError, TypeError):
            raise IngestError("row acl must be a JSON list of strings or one entry ('public', 'group:NAME', an id)",
                              str(src.path), line) from None
        except InvalidRequest as e:
            raise IngestError(f"row acl: {e.message}", str(src.path), line) from None
    con.register("row_acl_in", pa.table({"acl": pa.array(lists, type=pa.list_(pa.string()))}))
    con.execute(
        f'CREATE OR REPLACE TABLE data."{src.name}" AS SELECT t.* REPLACE (n.acl AS acl) '
        f'FROM data."{src.name}" AS t POSITIONAL JOIN row_acl_in AS n'
    )
    con.unregister("row_acl_in")


def _row_acl_entries(raw: object) -> object:
    """A row ACL cell as a list: JSON text, a Parquet list, or one bare entry."""
    if isinstance(raw, str):
        text = raw.strip()
        if text.startswith("[") or text.startswith('"'):
            return json.loads(text)
        if valid_acl_entry(text):
            return [text]
        raise TypeError(raw)
    return raw


def _declared_key(con: duckdb.DuckDBPyConnection, src: TableSource, names: Sequence[str], rows: int) -> str:
    """A declared key must exist and be unique and non-null over every row."""
    key = src.key
    if key is None or key not in names:
        raise IngestError(f"declared key {key!r} is not a column", str(src.path))
    key_sql = f'SELECT count(DISTINCT "{key}"), count(*) - count("{key}") FROM data."{src.name}"'
    distinct, nulls = con.execute(key_sql).fetchall()[0]
    if distinct != rows or nulls:
        raise IngestError(f"declared key {key!r} is not unique and non-null in every row", str(src.path))
    return key


def _label_column(con: duckdb.DuckDBPyConnection, name: str, columns: list[ColumnInfo], rows: int) -> str | None:
    """The row key of a table a person laid out (inside a document file, or a workbook's sheet):
    its first text column whose values are unique and present in every row (what a printed
    table's rows are called by: "M8 bolt", "March"), else a `*_id` column as for any table."""
    for c in columns:
        if c.name != "doc_id" and c.type.upper().startswith("VARCHAR"):
            distinct, nulls = con.execute(f'SELECT count(DISTINCT "{c.name}"), count(*) - count("{c.name}") '
                                          f'FROM data."{name}"').fetchall()[0]
            if distinct == rows and not nulls:
                return c.name
    return _id_column(con, name, columns, rows)


def _id_column(con: duckdb.DuckDBPyConnection, name: str, columns: list[ColumnInfo], rows: int) -> str | None:
    """The first `*_id` text column (other than doc_id) whose values are unique: the row key."""
    for c in columns:
        if c.name.endswith("_id") and c.name != "doc_id" and c.type.upper().startswith("VARCHAR"):
            distinct = con.execute(f'SELECT count(DISTINCT "{c.name}") FROM data."{name}"').fetchall()[0][0]
            if distinct == rows:
                return c.name
    return None
