"""Hostile statements are rejected (each for its stated reason) or safely confined."""

from __future__ import annotations

import pytest

from retrieval.errors import Forbidden, RetrievalTimeout, RetrievalUnavailable, SqlRejected
from retrieval.retrievers.sql import SqlLimits, SqlRetriever
from retrieval.types import Principal

ERIN = Principal("erin", (), frozenset({"query", "sql"}))  # no groups: deployments is not hers
ALICE = Principal("alice", ("sre",), frozenset({"query", "sql"}))

HOSTILE = [
    ("DROP TABLE incidents", "statement_kind"),
    ("DELETE FROM incidents", "statement_kind"),
    ("INSERT INTO incidents (incident_id) VALUES ('x')", "statement_kind"),
    ("UPDATE incidents SET severity = 'sev1'", "statement_kind"),
    ("CREATE TABLE stolen AS SELECT * FROM incidents", "statement_kind"),
    ("ALTER TABLE incidents ADD COLUMN x INTEGER", "statement_kind"),
    ("ATTACH '/tmp/evil.db' AS evil", "statement_kind"),
    ("DETACH evil", "statement_kind"),
    ("COPY incidents TO '/tmp/out.csv'", "statement_kind"),
    ("PRAGMA database_list", "statement_kind"),
    ("SET threads = 1", "statement_kind"),
    ("RESET threads", "statement_kind"),
    ("INSTALL httpfs", "statement_kind"),
    ("LOAD httpfs", "statement_kind"),
    ("CALL pragma_version()", "statement_kind"),
    ("DESCRIBE incidents", "statement_kind"),
    ("SHOW TABLES", "statement_kind"),
    ("SUMMARIZE incidents", "statement_kind"),
    ("VACUUM", "statement_kind"),
    ("CHECKPOINT", "statement_kind"),
    ("USE data", "statement_kind"),
    ("/* just a comment */ DROP TABLE incidents", "statement_kind"),
    ("EXPORT DATABASE '/tmp/x'", "parse"),
    ("IMPORT DATABASE '/tmp/x'", "parse"),
    ("SELECT 1; DROP TABLE incidents", "multiple_statements"),
    ("SELECT 1; SELECT 2", "multiple_statements"),
    ("SELECT 1 -- harmless\n; DELETE FROM incidents", "multiple_statements"),
    ("SELECT * FROM read_csv('/etc/passwd')", "function"),
    ("SELECT * FROM read_csv_auto('/etc/passwd')", "function"),
    ("SELECT * FROM read_parquet('x.parquet')", "function"),
    ("SELECT * FROM read_json('x.json')", "function"),
    ("SELECT * FROM read_text('/etc/passwd')", "function"),
    ("SELECT content FROM read_blob('/etc/shadow')", "function"),
    ("SELECT * FROM glob('/*')", "function"),
    ("SELECT * FROM sqlite_scan('x.db', 't')", "function"),
    ("SELECT * FROM duckdb_tables()", "function"),
    ("SELECT * FROM duckdb_settings()", "function"),
    ("SELECT * FROM query('SELECT * FROM quarry.documents')", "function"),
    ("SELECT * FROM query_table('quarry.documents')", "function"),
    ("SELECT getenv('HOME')", "function"),
    ("SELECT current_setting('threads')", "function"),
    ("SELECT incident_id FROM incidents WHERE severity = (SELECT getenv('USER'))", "function"),
    ("SELECT * FROM '/etc/passwd'", "table"),
    ("SELECT * FROM 'https://example.com/x.csv'", "table"),
    ("SELECT * FROM information_schema.tables", "table"),
    ("SELECT * FROM pg_catalog.pg_class", "table"),
    ("SELECT * FROM sqlite_master", "table"),
    ("SELECT * FROM quarry.documents", "table"),
    ("SELECT * FROM documents", "table"),
    ("SELECT * FROM chunks", "table"),
    ("SELECT * FROM data.deployments", "table"),
    ("SELECT * FROM deployments", "table"),
    ("sElEcT * FrOm DePlOyMeNtS", "table"),
    ('SELECT * FROM "DEPLOYMENTS"', "table"),
    ("SELECT * FROM deployment\u0455", "table"),  # Cyrillic dze looks like an s
    ("WITH x AS (SELECT * FROM deployments) SELECT * FROM x", "table"),
    ("SELECT * FROM incidents WHERE incident_id IN (SELECT fixes_incident FROM deployments)", "table"),
    ("SELECT incident_id FROM incidents UNION SELECT release_id FROM deployments", "table"),
    ("SELECT * FROM (WITH documents AS (SELECT 1) SELECT * FROM documents) a, documents", "table"),
    # A CTE is not visible inside its own definition or an earlier one: DuckDB reads the
    # catalog object of that name there (a system view describing every table).
    ("WITH duckdb_tables AS (SELECT * FROM duckdb_tables) SELECT table_name FROM duckdb_tables", "table"),
    ("WITH duckdb_columns AS (SELECT * FROM (SELECT * FROM duckdb_columns)) SELECT * FROM duckdb_columns", "table"),
    ("WITH a AS (SELECT * FROM sqlite_master), sqlite_master AS (SELECT 1) SELECT * FROM a", "table"),
    ("WITH a AS (SELECT * FROM deployments), deployments AS (SELECT 1) SELECT * FROM a", "table"),
    ("WITH RECURSIVE duckdb_tables AS (SELECT * FROM duckdb_tables) SELECT * FROM duckdb_tables", "statement_kind"),
    ("WITH RECURSIVE t AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM t WHERE n < 3) SELECT * FROM t", "statement_kind"),
    ("SELECT ?", "statement_kind"),
    ("", "empty"),
    ("SELECT 1 " + "+ 1 " * 5000, "too_long"),
    ("SELECT 'a\x00b'", "nul"),
    ("\uff33\uff25\uff2c\uff25\uff23\uff34 1", "parse"),  # full-width letters
    ("SELECT " + "(" * 42 + "1" + ")" * 42, "too_deep"),  # sqlglot's recursion limit, once a 500
    ("SELECT " + "(" * 3000 + "1" + ")" * 3000, "too_deep"),
    ("SELECT current_schema, current_role, user", "column"),  # session facts, not data
    ("SELECT current_user FROM incidents", "function"),
    ("SELECT printf('%1000000000d', 1)", "function"),  # one call, a gigabyte
    ("SELECT format('{:>1000000000}', 1)", "function"),
    ("SELECT repeat('x', 1000000000)", "function"),
]


@pytest.mark.parametrize("statement, reason", HOSTILE)
def test_hostile_statement_is_rejected_for_its_reason(sql_retriever, statement, reason):
    with pytest.raises(SqlRejected) as err:
        sql_retriever.run_statement(statement, ERIN)
    assert err.value.code == "sql_rejected"
    assert err.value.context["reason"] == reason, err.value.message


def test_there_are_at_least_forty_hostile_statements():
    assert len(HOSTILE) >= 40


def test_forbidden_and_missing_tables_get_the_same_error(sql_retriever):
    messages = []
    for table in ("deployments", "no_such_table"):
        with pytest.raises(SqlRejected) as err:
            sql_retriever.run_statement(f"SELECT count(*) FROM {table}", ERIN)
        messages.append(err.value.message.replace(table, "T"))
    assert messages[0] == messages[1] == "unknown table 'T'"


def test_row_acl_column_is_neither_returned_nor_selectable(sql_retriever):
    result = sql_retriever.run_statement("SELECT * FROM tickets", ERIN)
    assert "acl" not in result.columns
    with pytest.raises(SqlRejected, match="database refused"):
        sql_retriever.run_statement("SELECT acl FROM tickets", ERIN)


def test_where_clause_cannot_widen_the_row_acl(sql_retriever):
    narrow = sql_retriever.run_statement("SELECT count(*) FROM tickets", ERIN).rows[0][0]
    tricks = [
        "SELECT count(*) FROM tickets WHERE 1 = 1 OR true",
        "SELECT count(*) FROM (SELECT * FROM tickets) t",
        "WITH t AS (SELECT * FROM tickets) SELECT count(*) FROM t",
        "SELECT count(*) FROM tickets AS public_rows",
    ]
    for sql in tricks:
        assert sql_retriever.run_statement(sql, ERIN).rows[0][0] == narrow, sql


def test_ctes_see_earlier_ctes_and_the_body_sees_all(sql_retriever):
    sql = ("WITH a AS (SELECT incident_id FROM incidents), b AS (SELECT count(*) AS n FROM a), "
           "incidents AS (SELECT n FROM b) SELECT n FROM incidents")
    assert sql_retriever.run_statement(sql, ERIN).rows == sql_retriever.run_statement(
        "SELECT count(*) FROM incidents", ERIN).rows


def test_readable_table_with_cte_and_window_functions_runs(sql_retriever):
    sql = ("WITH d AS (SELECT service, count(*) AS n FROM deployments GROUP BY service) "
           "SELECT service, n, rank() OVER (ORDER BY n DESC) FROM d ORDER BY n DESC, service LIMIT 2")
    result = sql_retriever.run_statement(sql, ALICE)
    assert result.tables == ("deployments",) and len(result.rows) == 2


def test_sending_sql_needs_the_sql_scope(sql_retriever):
    with pytest.raises(Forbidden, match="'sql' scope"):
        sql_retriever.run_statement("SELECT 1", Principal("erin"))


def test_runaway_query_is_interrupted_at_the_time_limit(tables_index, threads):
    from indexes.catalog import Catalog
    from indexes.sql_runner import SqlRunner
    from indexes.snapshot_load import current_snapshot_path

    catalog = Catalog(current_snapshot_path(tables_index) / "catalog.duckdb")
    slow = SqlRetriever(SqlRunner(catalog, watchdogs=threads), SqlLimits(timeout_s=0.3), builder=threads)
    try:
        with pytest.raises(RetrievalTimeout, match="interrupted"):
            slow.run_statement("SELECT count(*) FROM incidents a, incidents b, incidents c, incidents d, incidents e", ERIN)
        assert slow.run_statement("SELECT count(*) FROM incidents", ERIN).rows == ((120,),)  # still usable
    finally:
        catalog.close()


def test_row_limit_truncates_and_says_so(tables_index, threads):
    from indexes.catalog import Catalog
    from indexes.sql_runner import SqlRunner
    from indexes.snapshot_load import current_snapshot_path

    catalog = Catalog(current_snapshot_path(tables_index) / "catalog.duckdb")
    try:
        sql = SqlRetriever(SqlRunner(catalog, watchdogs=threads), SqlLimits(max_rows=5), builder=threads)
        result = sql.run_statement("SELECT * FROM incidents", ERIN)
        assert len(result.rows) == 5 and result.truncated
    finally:
        catalog.close()


def _runner(tables_index, threads, **kw):
    from indexes.catalog import Catalog
    from indexes.sql_runner import SqlRunner
    from indexes.snapshot_load import current_snapshot_path

    catalog = Catalog(current_snapshot_path(tables_index) / "catalog.duckdb")
    return catalog, SqlRunner(catalog, watchdogs=threads, **kw)


def test_padding_to_a_gigabyte_is_refused_before_it_builds(tables_index, threads):
    catalog, runner = _runner(tables_index, threads)
    sql = SqlRetriever(runner, SqlLimits(timeout_s=5.0), builder=threads)
    try:
        for statement in ("SELECT length(rpad('x', 1000000000, 'y'))", "SELECT length(lpad('x', 2000000000))",
                          "SELECT length(rpad(title, CAST(1e9 AS INTEGER), title)) AS n FROM incidents LIMIT 1"):
            with pytest.raises(SqlRejected, match="row budget of 16,384 bytes") as err:
                sql.run_statement(statement, ERIN)
            assert err.value.context["reason"] == "too_large", statement
        assert sql.run_statement("SELECT length(lpad(title, 300, '.')) FROM incidents LIMIT 1", ERIN).rows == ((300,),)
    finally:
        sql.close()
        catalog.close()


def test_a_result_over_the_byte_cap_is_a_typed_rejection_naming_the_cap(tables_index, threads):
    catalog, runner = _runner(tables_index, threads, max_bytes=1_000_000)
    try:
        sql = SqlRetriever(runner, SqlLimits(timeout_s=5.0), builder=threads)
        with pytest.raises(SqlRejected, match="larger than 1,000,000 bytes") as err:
            sql.run_statement("SELECT lpad('x', 4000, 'y') FROM incidents a, incidents b", ERIN)
        assert err.value.context["reason"] == "too_large"
        big_aggregate = "SELECT string_agg(lpad(a.title, 4000, 'y'), ',') FROM incidents a, incidents b"
        with pytest.raises((SqlRejected, RetrievalTimeout, RetrievalUnavailable)):
            sql.run_statement(big_aggregate, ERIN)
        assert sql.run_statement("SELECT count(*) FROM incidents", ERIN).rows == ((120,),)  # still serving
    finally:
        catalog.close()


@pytest.mark.slow
def test_statements_beyond_the_server_wide_bound_wait_then_get_a_retryable_busy_error(tables_index, threads):
    import threading

    catalog, runner = _runner(tables_index, threads, max_concurrent=1)
    slow = "SELECT count(*) FROM data.incidents a, data.incidents b, data.incidents c, data.incidents d, data.incidents e"
    outcome: list[BaseException] = []

    def hold() -> None:
        try:
            runner.run(slow, 3.0, 10)  # runs until its own time limit interrupts it
        except BaseException as e:  # noqa: BLE001 - the test reads it
            outcome.append(e)

    try:
        first = threading.Thread(target=hold)
        first.start()
        while runner.running == 0:  # the first statement holds the only slot
            first.join(0.01)
        with pytest.raises(RetrievalUnavailable, match="busy") as err:
            runner.run("SELECT 1", 0.2, 10)
        assert err.value.retryable
        first.join(60)
        assert [type(e) for e in outcome] == [RetrievalTimeout]
        assert runner.running == 0 and runner.run("SELECT 1", 1.0, 10)[1] == [(1,)]  # the slot came back
    finally:
        first.join(60)
        catalog.close()


def test_runners_sharing_slots_bound_statements_across_generations(tables_index):
    """Two generations' runners given one slot and one watchdog thread: a statement of the
    second waits for the first's slot (then is busy) instead of running without a watchdog."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from indexes.fair_slots import FairSlots

    one_thread = ThreadPoolExecutor(1)
    slots = FairSlots(1)
    catalog, old = _runner(tables_index, one_thread, max_concurrent=1, slots=slots)
    _, new = _runner(tables_index, one_thread, max_concurrent=1, slots=slots)
    slow = "SELECT count(*) FROM data.incidents a, data.incidents b, data.incidents c, data.incidents d, data.incidents e"
    outcome: list[BaseException] = []

    def hold() -> None:
        try:
            old.run(slow, 3.0, 10)
        except BaseException as e:  # noqa: BLE001 - the test reads it
            outcome.append(e)

    first = threading.Thread(target=hold)
    try:
        first.start()
        while old.running == 0:
            first.join(0.01)
        with pytest.raises(RetrievalUnavailable, match="busy"):
            new.run("SELECT 1", 0.2, 10)
        first.join(60)
        assert [type(e) for e in outcome] == [RetrievalTimeout]
        assert new.run("SELECT 1", 1.0, 10)[1] == [(1,)]
        old.close()  # waits for its own statements only
        assert new.run("SELECT 2", 1.0, 10)[1] == [(2,)]
    finally:
        first.join(60)
        new.close()
        one_thread.shutdown()
        catalog.close()


def test_a_watchdog_that_never_started_is_not_waited_for(tables_index):
    """Stopping a watchdog still queued behind a busy thread returns at once (it is cancelled)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from indexes.sql_runner import _Watchdog

    one_thread, release = ThreadPoolExecutor(1), threading.Event()
    blocker = one_thread.submit(release.wait)
    catalog, runner = _runner(tables_index, one_thread)
    cursor = runner._con.cursor()
    stopped = threading.Event()
    try:
        dog = _Watchdog(cursor, 60.0, one_thread)
        stopper = threading.Thread(target=lambda: (dog.stop(), stopped.set()))
        stopper.start()
        assert stopped.wait(30), "stop() waited for a thread the watchdog never had"
        assert not blocker.done() and not dog.fired
    finally:
        release.set()
        cursor.close()
        runner.close()
        one_thread.shutdown()
        catalog.close()
