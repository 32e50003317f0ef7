"""The catalog's SQL runner tells a statement's mistakes from the database's own faults."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import duckdb
import pytest

from indexes.catalog import Catalog, SqlRunner
from indexes.snapshot import current_snapshot_path
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
def test_a_statement_the_database_refuses_is_sql_rejected(catalog_copy, statement):
    catalog, _ = catalog_copy
    with pytest.raises(SqlRejected, match="the database refused the statement"):
        SqlRunner(catalog).run(statement, 5.0, 10)


def test_an_io_fault_of_the_catalog_is_a_retryable_unavailable_database(catalog_copy):
    catalog, path = catalog_copy
    with open(path, "r+b") as f:  # the disk loses the table data under a running server
        f.truncate(3 * 4096)
    with pytest.raises(RetrievalUnavailable) as raised:
        SqlRunner(catalog).run("SELECT * FROM data.tickets", 5.0, 10)
    assert raised.value.retryable and "IOException" in raised.value.message
    assert str(path) not in raised.value.message  # the caller learns no server paths


def test_running_out_of_memory_is_a_retryable_unavailable_database():
    con = duckdb.connect(config={"memory_limit": "16MB", "temp_directory": ""})  # a real database, tightly capped
    try:
        runner = SqlRunner(SimpleNamespace(new_cursor=con.cursor))  # the runner needs only the catalog's cursors
        with pytest.raises(RetrievalUnavailable) as raised:
            runner.run("SELECT count(DISTINCT (i, i::VARCHAR)) FROM range(10000000) t(i)", 30.0, 10)
    finally:
        con.close()
    assert raised.value.retryable and "OutOfMemoryException" in raised.value.message
