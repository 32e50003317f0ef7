"""The catalog: its SQL runner tells a statement's mistakes from the database's own faults, and its
exact scan evaluates patterns on readable rows only."""

from __future__ import annotations

import shutil

import duckdb
import pytest

from indexes.catalog import Catalog
from indexes.sql_runner import SqlRunner
from indexes.snapshot_load import current_snapshot_path
from retrieval.errors import RetrievalUnavailable, SqlRejected


@pytest.fixture()
def catalog_copy(tables_index, tmp_path):
    path = tmp_path / "catalog.duckdb"
    shutil.copy(current_snapshot_path(tables_index) / "catalog.duckdb", path)
    catalog = Catalog(path)
    yield catalog, path
    catalog.close()


@pytest.mark.parametrize("statement", [
    "SELECT no_such_column FROM data.incidents",
    "SELECT CAST('seven' AS INTEGER)",
    "SELECT * FROM read_csv('/etc/passwd')",  # file access is switched off in the catalog
])
def test_a_statement_the_database_refuses_is_sql_rejected(catalog_copy, statement, threads):
    catalog, _ = catalog_copy
    with pytest.raises(SqlRejected, match="the database refused the statement"):
        SqlRunner(catalog, watchdogs=threads).run(statement, 5.0, 10)


def test_an_io_fault_of_the_catalog_is_a_retryable_unavailable_database(catalog_copy, threads):
    catalog, path = catalog_copy
    runner = SqlRunner(catalog, watchdogs=threads)  # opened with the index, as a server does
    with open(path, "r+b") as f:  # the disk loses the table data under a running server
        f.truncate(3 * 4096)
    with pytest.raises(RetrievalUnavailable) as raised:
        runner.run("SELECT * FROM data.tickets", 5.0, 10)
    assert raised.value.retryable and "IOException" in raised.value.message
    assert str(path) not in raised.value.message  # the caller learns no server paths


def test_running_out_of_memory_is_a_retryable_unavailable_database(catalog_copy, threads):
    catalog, _ = catalog_copy
    runner = SqlRunner(catalog, memory_mb=16, watchdogs=threads)  # the SQL route's own database, tightly capped
    try:
        with pytest.raises(RetrievalUnavailable) as raised:
            runner.run("SELECT count(DISTINCT (i, i::VARCHAR)) FROM range(10000000) t(i)", 30.0, 10)
    finally:
        runner.close()
    assert raised.value.retryable and "OutOfMemoryException" in raised.value.message


def _operators(node: dict):
    yield node
    for child in node.get("children", []):
        yield from _operators(child)


@pytest.mark.parametrize("stored", [False, True])
@pytest.mark.parametrize("phrases, patterns, idents", [((), (r"(?:^|[^\w])INC-2041(?:$|[^\w])",), ()),
                                                        (("ledger",), (), ()), ((), (), ("INC-2041",))])
def test_the_exact_scan_evaluates_patterns_only_on_readable_rows(mini_index, tmp_path, phrases, patterns, idents, stored):
    """Read from DuckDB's own profile of the statement: the pattern filter's input is the
    readable rows, and no table scan evaluates a pattern (a forbidden chunk is never matched,
    so it cannot change the time an exact search takes)."""
    import json

    import numpy as np
    import pyarrow as pa

    from indexes.catalog import match_sql

    copy = tmp_path / "catalog.duckdb"  # a copy: the session's engine holds the original open
    shutil.copy(current_snapshot_path(mini_index) / "catalog.duckdb", copy)
    con = duckdb.connect(str(copy), read_only=True)
    try:
        n = con.execute("SELECT count(*) FROM quarry.chunks").fetchall()[0][0]
        readable = np.arange(0, n, 3, dtype=np.int32)  # a third of the rows
        con.register("quarry_allowed_rows", pa.table({"r": readable}))
        profile = tmp_path / "profile.json"
        con.execute("PRAGMA enable_profiling='json'")
        con.execute(f"PRAGMA profiling_output='{profile}'")
        sql, params = match_sql(phrases, patterns, ["release"], stored, idents)
        con.execute(sql, params).fetchall()
        con.execute("PRAGMA disable_profiling")
    finally:
        con.close()
    ops = [op for root in json.loads(profile.read_text())["operator"] for op in _operators(root)]
    needle = "regexp_matches" if patterns or idents else "contains"
    assert any(needle in json.dumps(op["extra_info"]) for op in ops)  # the pattern is evaluated somewhere...
    chunk_scans = [op for op in ops if op["type"] == "TABLE_SCAN" and "quarry.chunks" in json.dumps(op["extra_info"])]
    assert chunk_scans
    for scan in chunk_scans:  # ...but never by the scan of the chunks, which emits readable rows only
        assert needle not in json.dumps(scan["extra_info"])
        assert scan["intermediate_rows"] <= len(readable) < n


def test_the_stored_search_text_matches_what_each_row_computed(mini_index):
    """quarry.document_search (each document's title and metadata, normalised once at
    ingest) gives every phrase and identifier the rows and scores the per-row expression gave."""
    import random

    import numpy as np

    from indexes.catalog import Catalog

    catalog = Catalog(current_snapshot_path(mini_index) / "catalog.duckdb")
    try:
        assert catalog._stored_search()
        docs = catalog.cursor().execute("SELECT title, CAST(metadata AS VARCHAR), text FROM quarry.documents").fetchall()
        rng = random.Random(4)
        phrases = []
        for title, meta, text in docs:
            for source in (title or "", meta, text):
                words = source.replace('"', " ").split()
                if len(words) >= 2:
                    at = rng.randrange(len(words) - 1)
                    phrases.append(" ".join(words[at : at + rng.randint(1, 2)]))
        title, meta, _ = next(d for d in docs if d[0] and d[1] != "{}")
        phrases.append(f"{title.split()[-1]} {meta.split()[0]}".lower())  # across the title and the metadata
        allowed = np.ones(len(catalog.chunk_table()), dtype=bool)
        for phrase in phrases:
            stored = catalog.match_rows([phrase], [], ["the"], allowed)
            catalog._has_search = False
            computed = catalog.match_rows([phrase], [], ["the"], allowed)
            catalog._has_search = True
            assert sorted(stored) == sorted(computed), phrase
        assert sum(bool(catalog.match_rows([p], [], [], allowed)) for p in phrases) >= len(phrases) // 2
        # Identifiers: whole tokens of the normalised parts, behind a literal test, against the
        # pattern over each row's raw joined text; some are only parts of longer tokens.
        texts = [t for d in docs for t in (d[0] or "", d[1], d[2])]
        idents = sorted({w.strip(".,;:()[]{}'\"") for t in texts for w in t.split() if any(c.isdigit() for c in w)})
        idents = [i for i in rng.sample(idents, min(40, len(idents))) if i] + ["INC-20", "2041", "E40"]
        assert len(idents) >= 20
        for ident in idents:
            stored = catalog.match_rows([], [], ["the"], allowed, [ident])
            catalog._has_search = False
            computed = catalog.match_rows([], [], ["the"], allowed, [ident])
            catalog._has_search = True
            assert sorted(stored) == sorted(computed), ident
        assert sum(bool(catalog.match_rows([], [], [], allowed, [i])) for i in idents) >= len(idents) // 2
        assert catalog.match_rows(["ledger"], [], [], allowed, ["INC-20"]) == []  # a prefix is not the identifier
    finally:
        catalog.close()
