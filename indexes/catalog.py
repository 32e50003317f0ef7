"""The DuckDB catalog of a snapshot: documents, chunks, their ACLs, and user tables.

Written once at build time, opened read-only when serving; each thread gets its own cursor
(DuckDB 2.x refuses new work on a connection with an undrained result). Quarry's own tables
live in schema `quarry`, user tables in schema `data`, and `main` stays empty, so an
unqualified name in a caller's SQL can never resolve to an internal table. At open, file
and network access is switched off and the configuration locked, as a second wall behind
the SQL guard.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any, Callable, Generator, Sequence

import duckdb
import numpy as np
import pyarrow as pa

from indexes.chunking import region_at
from indexes.tables import TableSource, load_tables
from retrieval.access import ChunkTable
from retrieval.constraints import identifier_pattern
from retrieval.errors import InvalidRequest
from retrieval.sql.schema import ColumnInfo, TableInfo
from retrieval.types import Chunk, Document, Region
from retrieval.text import normalize

log = logging.getLogger("quarry.catalog")
# DuckDB's memory for the serving connection, every statement together (exact scans, table
# profiles, callers' SQL); a statement that needs more fails as retryable, the process lives.
MEMORY_LIMIT = "1GB"
# A catalog write's DuckDB buffers (one 200k-chunk transaction peaked 880 MB above its input).
# Committed batches under this limit, and no checkpoint until the end: a checkpoint every
# 16 MB of log rewrote the growing tables each time (a million chunks: 174 s, now 53 s).
WRITE_MEMORY_LIMIT = "512MB"
WRITE_CONFIG: dict[str, Any] = {"memory_limit": WRITE_MEMORY_LIMIT, "checkpoint_threshold": "16GB"}
INSERT_BATCH = 50_000  # rows per Arrow batch while a catalog is written

# A document's metadata values as one text (keys left out): what exact matching and the
# grader's constraint checks read besides the title and the passage.
META_TEXT = "nullif(array_to_string(json_extract_string(d.metadata, '$.*'), ' \n '), '')"
# A document's title and metadata values as the exact scan matches them: lower case, single spaces.
SEARCH_META = f"regexp_replace(lower(coalesce(d.title, '') || ' ' || coalesce({META_TEXT}, '')), '\\s+', ' ', 'g')"

SCHEMA = """
CREATE SCHEMA quarry;
CREATE SCHEMA data;
CREATE TABLE quarry.documents (
    doc_id VARCHAR PRIMARY KEY, title VARCHAR, source VARCHAR, date DATE,
    metadata JSON, acl VARCHAR[] NOT NULL, text VARCHAR NOT NULL, origin VARCHAR, regions JSON
);
CREATE TABLE quarry.chunks (
    "row" INTEGER PRIMARY KEY, chunk_id VARCHAR NOT NULL, doc_id VARCHAR NOT NULL,
    start_offset INTEGER NOT NULL, end_offset INTEGER NOT NULL, text VARCHAR NOT NULL,
    norm VARCHAR NOT NULL, embed_key VARCHAR NOT NULL
);
CREATE TABLE quarry.tables (
    name VARCHAR PRIMARY KEY, acl VARCHAR[] NOT NULL, row_acl BOOLEAN NOT NULL, id_column VARCHAR,
    doc_column VARCHAR, n_rows BIGINT NOT NULL, columns JSON NOT NULL, source VARCHAR
);
"""


def write_catalog(path: Path, docs: Sequence[Document], origins: Sequence[str], chunks: Sequence[Chunk],
                  tables: Sequence[TableSource] = (), embed_keys: Sequence[str] = (),
                  copy_tables: tuple[Path, Sequence[TableInfo]] | None = None) -> list[TableInfo]:
    """A catalog file of these documents and chunks in one call (see CatalogWriter)."""
    with CatalogWriter(path, copy_tables) as writer:
        writer.add(docs, origins, chunks, embed_keys)
        return writer.finish(tables)


class CatalogWriter:
    """A new catalog file, written a batch of documents at a time (an ingest streams its
    corpus), then its user tables. Rows go in through Arrow in batches, each committed as it
    goes: DuckDB holds an open transaction's rows in memory (one 200k-chunk transaction
    peaked 1.4 GB above its input), and a failed build discards its whole `.building-*`
    folder, so the file needs no single transaction. `copy_tables` (another catalog and its
    tables) copies user tables as they are, for a compaction, which has the previous snapshot
    but not the files it was built from."""

    def __init__(self, path: Path | None, copy_tables: tuple[Path, Sequence[TableInfo]] | None = None,
                 connection: duckdb.DuckDBPyConnection | None = None) -> None:
        self._con = connection if connection is not None else duckdb.connect(str(path), config=WRITE_CONFIG)
        self._owned = connection is None
        self._copied: Sequence[TableInfo] = ()
        try:
            self._con.execute(SCHEMA)
            if copy_tables is not None:
                self._con.execute("ATTACH ? AS quarry_previous (READ_ONLY)", [str(copy_tables[0])])
                self._copied = copy_tables[1]
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> CatalogWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is None or not self._owned:
            self.close()
            return
        # A failed build discards the file: closing must not first fold its log into it (a
        # checkpoint of everything written so far), nor replace the error that ended it.
        try:
            self._con.execute("PRAGMA disable_checkpoint_on_shutdown")
            self._con.close()
        except Exception:  # noqa: BLE001 - the error in flight is the one to report
            pass

    def close(self) -> None:
        if self._owned:
            self._con.close()

    def add(self, docs: Sequence[Document], origins: Sequence[str], chunks: Sequence[Chunk],
            embed_keys: Sequence[str] = ()) -> None:
        """Documents and their chunks (at their `row`s; `embed_keys` pair with `chunks` by position)."""
        con = self._con
        for start in range(0, len(docs), INSERT_BATCH):
            batch = docs[start : start + INSERT_BATCH]
            _insert(con, "quarry.documents", pa.table({
                "doc_id": pa.array([d.id for d in batch], type=pa.string()),
                "title": pa.array([d.title for d in batch], type=pa.string()),
                "source": pa.array([d.source for d in batch], type=pa.string()),
                "date": pa.array([d.date for d in batch], type=pa.date32()),
                "metadata": pa.array([json.dumps(dict(d.metadata), sort_keys=True) for d in batch], type=pa.string()),
                "acl": pa.array([list(d.acl) for d in batch], type=pa.list_(pa.string())),
                "text": pa.array([d.text for d in batch], type=pa.string()),
                "origin": pa.array(list(origins[start : start + INSERT_BATCH]), type=pa.string()),
                "regions": pa.array([regions_json(d.regions) for d in batch], type=pa.string()),
            }))
        order = sorted(range(len(chunks)), key=lambda i: chunks[i].row)
        for start in range(0, len(order), INSERT_BATCH):
            at = order[start : start + INSERT_BATCH]
            part = [chunks[i] for i in at]
            _insert(con, "quarry.chunks", pa.table({
                "row": pa.array([c.row for c in part], type=pa.int32()),
                "chunk_id": pa.array([c.chunk_id for c in part], type=pa.string()),
                "doc_id": pa.array([c.doc_id for c in part], type=pa.string()),
                "start_offset": pa.array([c.start for c in part], type=pa.int32()),
                "end_offset": pa.array([c.end for c in part], type=pa.int32()),
                "text": pa.array([c.text for c in part], type=pa.string()),
                "norm": pa.array([normalize(c.text) for c in part], type=pa.string()),
                "embed_key": pa.array([embed_keys[i] for i in at] if embed_keys else [""] * len(part), type=pa.string()),
            }))

    def finish(self, tables: Sequence[TableSource] = ()) -> list[TableInfo]:
        """User tables (loaded from their files, or copied), the tables' registry, a checkpoint."""
        con = self._con
        infos = load_tables(con, tables)
        for t in self._copied:  # from the catalog attached as quarry_previous
            name = t.name.replace('"', '""')
            con.execute(f'CREATE TABLE data."{name}" AS SELECT * FROM quarry_previous.data."{name}"')
        infos = [*infos, *self._copied]
        # Each document's searchable title and metadata, computed once here rather than on
        # every row of every exact scan (at a million chunks that was most of a scan's 1.5 s).
        con.execute(f"CREATE TABLE quarry.document_search AS SELECT d.doc_id, {SEARCH_META} AS norm FROM quarry.documents d")
        for t in infos:
            con.execute(
                "INSERT INTO quarry.tables VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [t.name, list(t.acl), t.row_acl, t.id_column, t.doc_column, t.rows,
                 json.dumps(columns_json(t)), t.source],
            )
        if self._copied:
            con.execute("DETACH quarry_previous")
        if self._owned:
            con.execute("CHECKPOINT")
        return infos


def columns_json(t: TableInfo) -> list | dict:
    """A table's columns as stored: `[[name, type], ...]`, or, where its sidecar describes it
    or its columns or it is a table inside a document file, `{"columns": [[name, type,
    description, aliases], ...], "description", "aliases", "owner"}` (catalogs written before descriptions hold the list)."""
    if not (t.description or t.aliases or t.owner or any(c.description or c.aliases for c in t.columns)):
        return [[c.name, c.type] for c in t.columns]
    return {"columns": [[c.name, c.type, c.description, list(c.aliases)] for c in t.columns],
            "description": t.description, "aliases": list(t.aliases), **({"owner": t.owner} if t.owner else {})}


def table_from_row(r: Sequence[Any]) -> TableInfo:
    """A `quarry.tables` row (name, acl, row_acl, id_column, doc_column, n_rows, columns, source)."""
    stored = json.loads(r[6])
    notes = stored if isinstance(stored, dict) else {"columns": stored}
    columns = tuple(ColumnInfo(c[0], c[1], *((c[2], tuple(c[3])) if len(c) > 2 else ())) for c in notes["columns"])
    return TableInfo(r[0], columns, tuple(r[1]), bool(r[2]), r[3], r[4], int(r[5]), r[7],
                     notes.get("description", ""), tuple(notes.get("aliases", ())), notes.get("owner"))


def chunk_texts(path: Path, size: int = 4096) -> Generator[list[tuple[int, str | None, str]], None, None]:
    """(row, document title, chunk text) of every chunk of a catalog file, in row order, `size`
    at a time: what an ingest embeds, read back from the catalog it just wrote (a columnar scan,
    about 0.3 s per 100k chunks here) rather than from its sources again."""
    con = duckdb.connect(str(path), read_only=True, config={"memory_limit": WRITE_MEMORY_LIMIT})
    try:
        cur = con.execute('SELECT c."row", d.title, c.text FROM quarry.chunks c JOIN quarry.documents d '
                          'ON c.doc_id = d.doc_id ORDER BY c."row"')
        while rows := cur.fetchmany(size):
            yield rows
    finally:
        con.close()


def region_rows(regions: Sequence[Region]) -> list[list[Any]]:
    """A document's regions as JSON values, [start, end, page, [section...]] each: how the
    catalog, the write-ahead log and the content hash hold them."""
    return [[r.start, r.end, r.page, list(r.section)] for r in regions]


def regions_of(rows: Sequence[Sequence[Any]]) -> tuple[Region, ...]:
    return tuple(Region(int(s), int(e), p, tuple(sec)) for s, e, p, sec in rows)


def regions_json(regions: Sequence[Region]) -> str | None:
    """The catalog column (None for a document without regions)."""
    return json.dumps(region_rows(regions)) if regions else None


def parse_regions(stored: str | None) -> tuple[Region, ...]:
    return regions_of(json.loads(stored)) if stored else ()


def _insert(con: duckdb.DuckDBPyConnection, table: str, rows: pa.Table) -> None:
    con.register("quarry_rows_in", rows)
    try:
        con.execute(f"INSERT INTO {table} SELECT * FROM quarry_rows_in")
    finally:
        con.unregister("quarry_rows_in")


class Catalog:
    """Read-only access to a snapshot's catalog."""

    def __init__(self, path: Path, memory_limit: str = MEMORY_LIMIT, connection: duckdb.DuckDBPyConnection | None = None) -> None:
        self.path = path
        self._con = connection if connection is not None else duckdb.connect(
            str(path), read_only=True, config={"enable_external_access": False, "memory_limit": memory_limit})
        try:
            self._con.execute("SET TimeZone = 'UTC'")
            self._con.execute("SET lock_configuration = true")
        except duckdb.InvalidInputException:
            pass  # another Catalog in this process opened the same file and locked it already
        locked = self._con.execute(
            "SELECT current_setting('enable_external_access'), current_setting('lock_configuration')"
        ).fetchall()[0]
        if locked != (False, True):
            raise RuntimeError(f"catalog {path} is not locked down: {locked}")
        self._local = threading.local()

    @classmethod
    def in_memory(cls, path: Path, docs: Sequence[Document], origins: Sequence[str], chunks: Sequence[Chunk],
                  embed_keys: Sequence[str] = (), memory_limit: str = "256MB") -> Catalog:
        """A catalog of a few documents held in memory (a live index's delta segment; `path`
        names the index it belongs to), locked down like one opened from a file."""
        con = duckdb.connect(":memory:", config={"memory_limit": memory_limit})
        try:
            writer = CatalogWriter(None, connection=con)
            writer.add(docs, origins, chunks, embed_keys)
            writer.finish()
            con.execute("SET enable_external_access = false")
        except BaseException:
            con.close()
            raise
        return cls(path, connection=con)

    def close(self) -> None:
        self._con.close()

    def _regions_sql(self, alias: str = "d") -> str:
        """The documents' regions column, or NULL in a catalog written before it existed."""
        known = getattr(self, "_has_regions", None)
        if known is None:
            known = self._has_regions = bool(self.cursor().execute(
                "SELECT count(*) FROM duckdb_columns() WHERE schema_name = 'quarry' AND table_name = 'documents' "
                "AND column_name = 'regions'").fetchone()[0])  # type: ignore[index]
        return f"{alias}.regions" if known else "NULL"

    def _stored_search(self) -> bool:
        """Whether this catalog holds quarry.document_search (written since it exists)."""
        known = getattr(self, "_has_search", None)
        if known is None:
            known = self._has_search = bool(self.cursor().execute(
                "SELECT count(*) FROM duckdb_tables() WHERE schema_name = 'quarry' AND table_name = 'document_search'"
            ).fetchone()[0])  # type: ignore[index]
        return known

    def cursor(self) -> duckdb.DuckDBPyConnection:
        cur = getattr(self._local, "cur", None)
        if cur is None:
            cur = self._local.cur = self._con.cursor()
        return cur

    def new_cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor of its own, for work that may be interrupted (SQL with a time limit)."""
        return self._con.cursor()

    def tables(self) -> dict[str, TableInfo]:
        """User tables by name (loaded once; a snapshot never changes)."""
        cached = getattr(self, "_tables", None)
        if cached is None:
            rows = self.cursor().execute(
                "SELECT name, acl, row_acl, id_column, doc_column, n_rows, columns, source FROM quarry.tables ORDER BY name"
            ).fetchall()
            cached = self._tables = {r[0]: table_from_row(r) for r in rows}
        return cached

    def acl_tokens(self) -> frozenset[str]:
        """Every ACL entry some table or table row names (loaded once): what an access scope
        over the tables is made of."""
        cached = getattr(self, "_acl_tokens", None)
        if cached is None:
            tokens = {t for info in self.tables().values() for t in info.acl}
            for info in self.tables().values():
                if info.row_acl:
                    name = info.name.replace('"', '""')
                    rows = self.cursor().execute(f'SELECT DISTINCT unnest(acl) FROM data."{name}"').fetchall()
                    tokens.update(str(r[0]) for r in rows if r[0] is not None)
            cached = self._acl_tokens = frozenset(tokens)
        return cached

    def counts(self) -> dict[str, int]:
        cur = self.cursor()
        docs = cur.execute("SELECT count(*) FROM quarry.documents").fetchall()[0][0]
        chunks = cur.execute("SELECT count(*) FROM quarry.chunks").fetchall()[0][0]
        tables = cur.execute("SELECT count(*) FROM quarry.tables").fetchall()[0][0]
        return {"documents": int(docs), "chunks": int(chunks), "tables": int(tables)}

    def chunk_table(self, mask_cache_size: int = 512, mask_cache_bytes: int = 256 << 20) -> ChunkTable:
        """Load the per-chunk columns that access checks and hit building need; the table
        keeps up to `mask_cache_size` access masks and `mask_cache_bytes` of them."""
        rows = self.cursor().execute(
            f"""SELECT c.chunk_id, c.doc_id, c.text, c.start_offset, c.end_offset,
                      d.title, d.source, CAST(d.date AS VARCHAR) AS date_s, d.acl, {META_TEXT} AS meta
               FROM quarry.chunks c JOIN quarry.documents d USING (doc_id) ORDER BY c."row" """
        ).fetchnumpy()
        return ChunkTable(
            places=self._places(),
            chunk_ids=rows["chunk_id"].tolist(),
            doc_ids=rows["doc_id"].tolist(),
            texts=rows["text"].tolist(),
            starts=np.asarray(rows["start_offset"], dtype=np.int64),
            ends=np.asarray(rows["end_offset"], dtype=np.int64),
            titles=_none_list(rows["title"]),
            sources=_none_list(rows["source"]),
            dates=_none_list(rows["date_s"]),
            acls=[tuple(a) for a in rows["acl"].tolist()],
            metas=_none_list(rows["meta"]),
            cache_size=mask_cache_size,
            cache_bytes=mask_cache_bytes,
        )

    def _places(self) -> dict[int, Region]:
        """Per chunk of a document with regions, by its position in the chunk table (a delta
        segment's rows are numbered after its base's), the region its passage lies in."""
        regions_sql = self._regions_sql()
        if regions_sql == "NULL":
            return {}
        got = self.cursor().execute(
            f"""WITH c AS (SELECT doc_id, end_offset, row_number() OVER (ORDER BY "row") - 1 AS at FROM quarry.chunks)
               SELECT d.doc_id, any_value({regions_sql}), list(c.at ORDER BY c.at), list(c.end_offset ORDER BY c.at)
               FROM quarry.documents d JOIN c USING (doc_id) WHERE {regions_sql} IS NOT NULL
               GROUP BY d.doc_id""").fetchall()
        places: dict[int, Region] = {}
        for _, stored, rows, ends in got:
            regions = parse_regions(stored)
            starts = [r.start for r in regions]
            for row, end in zip(rows, ends, strict=True):
                place = region_at(regions, starts, max(int(end) - 1, 0))
                if place is not None:
                    places[int(row)] = place
        return places

    def embed_keys(self) -> list[str]:
        """Per row, the hash of the text the embedder saw (to reuse vectors in a rebuild)."""
        return [r[0] for r in self.cursor().execute('SELECT embed_key FROM quarry.chunks ORDER BY "row"').fetchall()]

    def entity_names(self) -> tuple[list[tuple[int, str]], list[tuple[int, str]], list[tuple[int, str]]]:
        """(row, name) pairs for entities: document titles; identifiers inside titles (they name
        a document only while the reader sees one title carrying them, which the entity index
        decides per reader); short string metadata values. Each chunk row carries its
        document's names. Read once (a catalog never changes; a live index asks for the base's
        names at every write)."""
        cached = getattr(self, "_entity_names", None)
        if cached is None:
            cached = self._entity_names = self._read_entity_names()
        return cached

    def _read_entity_names(self) -> tuple[list[tuple[int, str]], list[tuple[int, str]], list[tuple[int, str]]]:
        from retrieval.constraints import identifiers

        cur = self.cursor()
        titles: list[tuple[int, str]] = []
        title_ids: list[tuple[int, str]] = []
        values: list[tuple[int, str]] = []
        records = cur.execute(
            'SELECT c."row", d.title, d.metadata FROM quarry.chunks c JOIN quarry.documents d USING (doc_id) ORDER BY c."row"'
        ).fetchall()
        for row, title, metadata in records:
            if title:
                titles.append((row, title))
                title_ids.extend((row, i) for i in identifiers(title))
            for v in (json.loads(metadata) if metadata else {}).values():
                if isinstance(v, str) and 0 < len(v.split()) <= 5:
                    values.append((row, v))
        return titles, title_ids, values

    def document_acl(self, doc_id: str) -> tuple[str, ...] | None:
        """The ACL of one document (None when there is none): read before its text, so a
        forbidden document's text is never read and its size cannot show in the timing."""
        got = self.cursor().execute("SELECT acl FROM quarry.documents WHERE doc_id = ?", [doc_id]).fetchall()
        return tuple(got[0][0]) if got else None

    def readable_document(self, doc_id: str, can_read: Callable[[tuple[str, ...]], bool]) -> Document | None:
        """The document when `can_read` accepts its ACL, else None, exactly as for a missing id;
        the text is read only after the ACL passed."""
        acl = self.document_acl(doc_id)
        return self.document(doc_id) if acl is not None and can_read(acl) else None

    def document(self, doc_id: str) -> Document | None:
        got = self.cursor().execute(
            f"SELECT doc_id, text, title, source, date, metadata, acl, {self._regions_sql()} FROM quarry.documents d "
            "WHERE doc_id = ?", [doc_id]
        ).fetchall()
        if not got:
            return None
        d_id, text, title, source, d, metadata, acl, regions = got[0]
        return Document(id=d_id, text=text, title=title, source=source, date=d,
                        metadata=json.loads(metadata) if metadata else {}, acl=tuple(acl), regions=parse_regions(regions))

    def origin(self, doc_id: str) -> str:
        """Where a document came from (`path:line` of its ingest, or its writer)."""
        got = self.cursor().execute("SELECT origin FROM quarry.documents WHERE doc_id = ?", [doc_id]).fetchall()
        return str(got[0][0] or "") if got else ""

    def documents(self) -> list[tuple[Document, str]]:
        """Every document with its origin, in the order of their first chunk (one query: what
        a compaction folds)."""
        got = self.cursor().execute(
            f"""SELECT d.doc_id, d.text, d.title, d.source, d.date, d.metadata, d.acl, d.origin, {self._regions_sql()}
               FROM quarry.documents d
               JOIN (SELECT doc_id, min("row") AS first FROM quarry.chunks GROUP BY doc_id) c USING (doc_id)
               ORDER BY c.first"""
        ).fetchall()
        return [(Document(id=i, text=t, title=ti, source=so, date=da, metadata=json.loads(m) if m else {}, acl=tuple(a),
                          regions=parse_regions(r)), o or "") for i, t, ti, so, da, m, a, o, r in got]

    def match_rows(self, phrases: Sequence[str], patterns: Sequence[str], terms: Sequence[str],
                   allowed: np.ndarray, identifiers: Sequence[str] = ()) -> list[tuple[int, float]]:
        """Rows containing every phrase (case-insensitive) and identifier (as a whole token)
        and matching every RE2 pattern.

        A row is searched together with its document's title and metadata values, so an
        identifier that only the title ("HIT-1042: ...") or a metadata field carries finds
        the document's passages. The score counts occurrences of the required items, plus
        0.1 per other query term present, so more specific passages come first.

        `allowed` (the caller's access mask) is applied inside the scan: the rows join the
        mask first and the patterns are evaluated on readable rows only (behind a CASE on the
        join, which no optimizer can move before it), so a forbidden chunk is never matched,
        scored, or timed.
        """
        if not phrases and not patterns and not identifiers:
            return []
        rows = np.flatnonzero(allowed).astype(np.int32)
        if not len(rows):
            return []
        cur = self.cursor()
        cur.register("quarry_allowed_rows", pa.table({"r": rows}))
        sql, params = match_sql(phrases, patterns, terms, self._stored_search(), identifiers)
        try:
            got = cur.execute(sql, params).fetchall()
        except duckdb.InvalidInputException as e:
            raise InvalidRequest(f"invalid regular expression: {e}") from None
        finally:
            cur.unregister("quarry_allowed_rows")
        return [(int(r), float(s)) for r, s in got]


def match_sql(phrases: Sequence[str], patterns: Sequence[str], terms: Sequence[str],
              stored: bool = False, identifiers: Sequence[str] = ()) -> tuple[str, list[Any]]:
    """The exact scan's statement and parameters (see Catalog.match_rows); it reads the
    caller's readable rows from a registered relation `quarry_allowed_rows(r)`, and with
    `stored` the documents' searchable text from quarry.document_search (catalogs written
    before it existed compute it per row).

    With stored text and no pattern of the caller's, nothing reads the raw text: the
    document's normalised title and metadata and the chunk's normalised text are searched
    apart rather than joined per row (a normalised needle holds no newline, so it never spans
    the ' \n ' that would join them, and a whole-token pattern's edges match there as they
    would at the join), and an ASCII identifier must first be in the text as a literal
    before its whole-token pattern runs (a cheap test that cuts a million-row scan by about
    3.7x). Otherwise each row's raw text is joined with its document's title and metadata,
    and identifiers are whole-token patterns over it."""
    needles = [normalize(p) for p in phrases]
    split = stored and not patterns
    idents = [normalize(i) for i in identifiers] if split else []
    regexes = [identifier_pattern(i) for i in idents] if split else [*patterns, *map(identifier_pattern, identifiers)]
    parts = ("mnorm", "cnorm") if split else ("norm",)
    raw = parts if split else ("text",)

    def over(form: str, columns: Sequence[str], value: str, glue: str) -> tuple[str, list[Any]]:
        return "(" + glue.join(form.format(c) for c in columns) + ")", [value] * len(columns)

    def count(needle: str) -> tuple[str, list[Any]]:
        sql, params = over("(length({0}) - length(replace({0}, ?, '')))", parts, needle, " + ")
        return f"{sql} / length(?)", [*params, needle]

    def has(needle: str) -> tuple[str, list[Any]]:
        return over("contains({0}, ?)", parts, needle, " OR ")

    score = [count(n) for n in needles] + [over("len(regexp_extract_all({0}, ?, 0, 'i'))", raw, r, " + ") for r in regexes]
    score += [(f"0.1 * CAST({h} AS INTEGER)", hp) for h, hp in map(has, (normalize(t) for t in terms))]
    # Cheap tests first; each behind its own test of the join, so no optimizer can move one into the scan.
    where = [has(n) for n in needles] + [has(i) for i in idents if i.isascii()]
    where += [over("regexp_matches({0}, ?, 'i')", raw, r, " OR ") for r in regexes]
    params = [x for _, ps in score + where for x in ps]
    # Title and metadata are lower-cased with single spaces, as `norm` is (see normalize()).
    meta, join = ("m.norm", "JOIN quarry.document_search m USING (doc_id)") if stored else (SEARCH_META, "")
    if split:
        searchable = f"""WITH s AS (
        SELECT c."row", a.r AS readable, coalesce(m.norm, '') AS mnorm, coalesce(c.norm, '') AS cnorm
        FROM quarry.chunks c JOIN quarry_allowed_rows a ON a.r = c."row" {join})"""
    else:
        searchable = f"""WITH s AS (
        SELECT c."row", a.r AS readable, concat_ws(' \n ', d.title, {META_TEXT}, c.text) AS text,
               concat_ws(' \n ', {meta}, c.norm) AS norm
        FROM quarry.chunks c JOIN quarry_allowed_rows a ON a.r = c."row" JOIN quarry.documents d USING (doc_id) {join})"""
    guarded = " AND ".join(f"CASE WHEN readable IS NOT NULL THEN {sql} ELSE false END" for sql, _ in where)
    sql = f'{searchable} SELECT "row", {" + ".join(sql for sql, _ in score)} AS s FROM s WHERE {guarded}'
    return sql, params


def _none_list(arr: np.ndarray) -> list[Any]:
    return [None if (v is None or (isinstance(v, float) and np.isnan(v))) else v for v in arr.tolist()]


