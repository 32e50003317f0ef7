"""What one statement can build is bounded by construction: calls that could build a large value
are checked from their inputs before they run, the statement grows linearly with its nesting,
results are sized before they become Python objects, and a watchdog keeps interrupting."""

from __future__ import annotations

import threading
import time

import pytest

from benchmarks.hostile_sql import Peak, Schema, hostile_statements
from retrieval.errors import RetrievalTimeout, RetrievalUnavailable, SqlRejected
from retrieval.retrievers.sql import SqlLimits, SqlRetriever
from retrieval.sql.guard import guard_sql
from retrieval.types import Principal

ALICE = Principal("alice", ("sre",), frozenset({"query", "sql"}))
NESTED_REPLACE = ("SELECT max(length(regexp_replace(regexp_replace(title, '', title, 'g'), '', "
                  "regexp_replace(title, '', title, 'g'), 'g'))) FROM incidents")


@pytest.fixture(scope="module")
def bounded(tables_index, threads):
    from indexes.catalog import Catalog
    from indexes.snapshot_load import current_snapshot_path
    from indexes.sql_runner import SqlRunner

    catalog = Catalog(current_snapshot_path(tables_index) / "catalog.duckdb")
    sql = SqlRetriever(SqlRunner(catalog, watchdogs=threads), SqlLimits(timeout_s=1.0), builder=threads)
    yield sql
    sql.close()
    catalog.close()


def test_a_call_that_would_build_past_its_share_of_the_row_budget_is_refused_before_it_runs(bounded):
    with pytest.raises(SqlRejected, match="row budget") as err:
        bounded.run_statement(NESTED_REPLACE, ALICE)  # it ran a minute and took a gigabyte, past every limit
    assert err.value.context["reason"] == "too_large" and "regexp_replace" in err.value.message
    within = bounded.run_statement("SELECT max(length(regexp_replace(service, '', '-', 'g'))) FROM incidents", ALICE)
    assert within.rows[0][0] > 0  # the same functions within the budget run as before


@pytest.mark.parametrize("statement", [
    "SELECT length(concat(a.title, b.title)) FROM incidents a, incidents b LIMIT 1",
    "SELECT length(a.title || b.title || a.title) FROM incidents a, incidents b LIMIT 1",
    "SELECT length(concat_ws('-', title, service, team)) FROM incidents LIMIT 1",
    "SELECT length(lpad(title, 200, '.')) FROM incidents LIMIT 1",
    "SELECT length(strftime(DATE '2025-01-02', '%Y-%m-%d %A')) FROM incidents LIMIT 1",
])
def test_calls_within_the_budget_answer_what_they_always_did(bounded, tables_index, statement):
    from indexes.catalog import Catalog
    from indexes.snapshot_load import current_snapshot_path

    plain = Catalog(current_snapshot_path(tables_index) / "catalog.duckdb")  # DuckDB itself, unguarded
    try:
        expected = plain.new_cursor().execute(statement.replace("FROM incidents", "FROM data.incidents")
                                              .replace(", incidents b", ", data.incidents b")).fetchall()
    finally:
        plain.close()
    assert [tuple(r) for r in bounded.run_statement(statement, ALICE).rows] == expected


def test_the_budget_is_shared_by_the_statements_calls(bounded):
    one = "SELECT lpad(title, 3000, '.') FROM incidents LIMIT 1"  # 12,000 bytes at most: within 16,384
    assert len(bounded.run_statement(one, ALICE).rows[0][0]) == 3000
    two = "SELECT lpad(title, 3000, '.'), lpad(service, 3000, '.') FROM incidents LIMIT 1"
    with pytest.raises(SqlRejected, match="8,192 bytes"):  # two calls: half each
        bounded.run_statement(two, ALICE)


def test_a_function_called_by_a_qualified_name_is_refused(bounded):
    for statement in ("SELECT main.lpad('x', 100000, 'y')", "SELECT length(system.main.rpad(title, 50000)) FROM incidents"):
        with pytest.raises(SqlRejected, match="never qualified"):
            bounded.run_statement(statement, ALICE)


def test_nesting_grows_the_statement_linearly(tables_index):
    """sqlglot writes initcap for DuckDB with its argument three times; bound through the
    lambda, seven nested calls make a statement of thousands of characters, not millions."""
    from indexes.catalog import Catalog
    from indexes.snapshot_load import current_snapshot_path

    catalog = Catalog(current_snapshot_path(tables_index) / "catalog.duckdb")
    try:
        for k in (1, 7):
            statement = "SELECT " + "initcap(" * k + "title" + ")" * k + " FROM incidents"
            assert len(guard_sql(statement, catalog.tables(), ALICE.access_scope()).sql) < 1500 * k
    finally:
        catalog.close()


def test_collecting_aggregates_are_refused_as_window_functions(bounded):
    for statement in ("SELECT string_agg(title, ',') OVER (ORDER BY incident_id) FROM incidents",
                      "SELECT list(title) OVER () FROM incidents"):
        with pytest.raises(SqlRejected, match="window function"):
            bounded.run_statement(statement, ALICE)


def test_a_large_result_is_refused_by_its_bytes_before_any_row_becomes_python(bounded, monkeypatch):
    import indexes.sql_runner as runner

    converted: list[int] = []
    real = runner.python_rows
    monkeypatch.setattr(runner, "python_rows", lambda table: converted.append(table.nbytes) or real(table))
    with pytest.raises(SqlRejected, match="larger than 4,000,000 bytes") as err:  # one list of 1.7 million numbers
        bounded.run_statement("SELECT array_agg(a.resolution_hours) FROM incidents a, incidents b, incidents c", ALICE)
    assert err.value.context["reason"] == "too_large" and converted == []
    assert bounded.run_statement("SELECT count(*) FROM incidents", ALICE).rows == ((120,),)
    assert converted and max(converted) < 1000


@pytest.mark.slow
def test_generated_hostile_statements_end_typed_far_within_their_time_and_memory(bounded):
    """Nestings of the allowed string, regex, list and aggregate functions over self-joins (and
    the two of the security review): each ends with rows or a typed error. The bounds are loose,
    so a slow machine passes; before, the nested replace took 660 MB here and a list over a
    four-way self-join a gigabyte."""
    reported = [NESTED_REPLACE, "SELECT array_agg(a.resolution_hours) FROM incidents a, incidents b, incidents c, incidents d"]
    for statement in reported + hostile_statements(40, Schema("incidents", ("title", "service", "team"), "resolution_hours")):
        t0 = time.monotonic()
        with Peak() as peak:
            try:
                bounded.run_statement(statement, ALICE)
            except (SqlRejected, RetrievalTimeout, RetrievalUnavailable):
                pass
        assert time.monotonic() - t0 < 20 and peak.growth < 400, (statement, peak.growth)


def test_the_watchdog_interrupts_again_until_the_statement_returns(threads):
    """An interrupt that arrives before DuckDB starts the statement is forgotten; the watchdog
    sends it again until the statement is over."""
    from indexes.sql_runner import _Watchdog

    class Cursor:
        def __init__(self) -> None:
            self.interrupts = 0
            self.third = threading.Event()

        def interrupt(self) -> None:
            self.interrupts += 1
            if self.interrupts == 3:
                self.third.set()

    cursor = Cursor()
    watchdog = _Watchdog(cursor, 0.01, threads)  # type: ignore[arg-type]
    assert cursor.third.wait(30)
    watchdog.stop()
    stopped_at = cursor.interrupts
    time.sleep(0.2)
    assert watchdog.fired and cursor.interrupts == stopped_at


@pytest.mark.slow
def test_the_reported_statements_end_typed_and_another_callers_simple_sql_keeps_answering(tables_index, threads):
    """Two clients send the security review's two statements again and again (they held both
    slots for 85 s); each ends as a typed refusal, and a third caller's simple statement,
    waiting for a slot within its own time limit, is answered every time."""
    from indexes.catalog import Catalog
    from indexes.snapshot_load import current_snapshot_path
    from indexes.sql_runner import SqlRunner

    catalog = Catalog(current_snapshot_path(tables_index) / "catalog.duckdb")
    sql = SqlRetriever(SqlRunner(catalog, watchdogs=threads), SqlLimits(timeout_s=5.0), builder=threads)
    reported = [NESTED_REPLACE, "SELECT array_agg(a.cost_usd) FROM tickets a, tickets b, tickets c, tickets d"]
    stop, outcomes, simple = threading.Event(), [], []

    def attack(statement: str) -> None:
        while not stop.is_set():
            try:
                sql.run_statement(statement, ALICE)
                outcomes.append("rows")
            except (SqlRejected, RetrievalUnavailable, RetrievalTimeout) as e:
                outcomes.append(e.code)

    threads = [threading.Thread(target=attack, args=(s,)) for s in reported]
    try:
        for t in threads:
            t.start()
        while len(outcomes) < 4:
            time.sleep(0.01)
        for _ in range(10):
            simple.append(sql.run_statement("SELECT count(*) FROM tickets", Principal("bob", ("finance",),
                                                                                         frozenset({"query", "sql"}))).rows)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
        sql.close()
        catalog.close()
    assert set(outcomes) <= {"sql_rejected", "retrieval_unavailable"} and "sql_rejected" in outcomes
    assert len(simple) == 10 and all(rows[0][0] > 0 for rows in simple)
