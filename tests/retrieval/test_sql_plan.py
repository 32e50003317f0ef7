"""Query plans rendered to SQL: names and values are quoted by construction, and the SQL
runs in DuckDB and passes the guard whatever characters the names and values hold."""

from __future__ import annotations

from datetime import date

import duckdb
from hypothesis import given, settings, strategies as st

from retrieval.sql.guard import guard_sql
from retrieval.sql.plan import Aggregate, Compare, DateWithin, Equals, Order, QueryPlan
from retrieval.sql.render import render_sql
from retrieval.sql.schema import ColumnInfo, TableInfo
from retrieval.types import Principal

ROWS = [("a-1", "O'Brien", 5.0, date(2025, 1, 10)), ("a-2", "O'Brien", 12.5, date(2025, 3, 2)),
        ("a-3", 'say "hi"; DROP', 30.0, date(2025, 6, 1))]


def _table(column: str) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute(f'CREATE TABLE "order" (order_id VARCHAR, "{column}" VARCHAR, "cost usd" DOUBLE, placed_on DATE)')
    con.executemany('INSERT INTO "order" VALUES (?, ?, ?, ?)', ROWS)
    return con


def test_a_plan_on_a_reserved_table_name_with_odd_columns_and_quoted_values_runs_as_planned():
    plan = QueryPlan("order", "list", ("order_id", "owner (name)"),
                     filters=(Equals("owner (name)", "O'Brien"), Compare("cost usd", ">", 6.0),
                              DateWithin("placed_on", date(2025, 2, 1), None)),
                     order_by=(Order("placed_on", True),), limit=5)
    sql = render_sql(plan)
    assert sql.startswith('SELECT "order_id", "owner (name)" FROM "order" WHERE')
    assert _table("owner (name)").execute(sql).fetchall() == [("a-2", "O'Brien")]


def test_grouped_top_orders_by_the_aggregate_value_then_the_group():
    plan = QueryPlan("order", "grouped top", ("owner",), Aggregate("sum", "cost usd"), group_by="owner",
                     order_by=(Order(None, True), Order("owner")), limit=1)
    sql = render_sql(plan)
    assert sql.endswith('GROUP BY "owner" ORDER BY value DESC, "owner" LIMIT 1')
    assert _table("owner").execute(sql).fetchall() == [('say "hi"; DROP', 30.0)]
    assert plan.ordered and plan.columns_used() == {"owner", "cost usd"}


@given(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=20))
@settings(max_examples=60, deadline=None)
def test_any_value_renders_as_one_string_literal_the_guard_accepts(value):
    table = TableInfo("order", (ColumnInfo("order_id", "VARCHAR"), ColumnInfo("owner", "VARCHAR")), ("public",))
    sql = render_sql(QueryPlan("order", "count", aggregate=Aggregate("count"), filters=(Equals("owner", value),)))
    guarded = guard_sql(sql, {"order": table}, Principal("anyone").access_scope())
    assert guarded.tables == ("order",)
    con = duckdb.connect()
    con.execute('CREATE SCHEMA data; CREATE TABLE data."order" (order_id VARCHAR, owner VARCHAR)')
    con.execute('INSERT INTO data."order" VALUES (?, ?), (?, ?)', ["x-1", value, "x-2", value + "!"])
    assert con.execute(guarded.sql).fetchall() == [(1,)]


def test_a_compared_number_is_written_exactly_not_rounded():
    con = duckdb.connect()
    con.execute('CREATE TABLE "order" (order_id VARCHAR, "cost usd" DOUBLE)')
    con.executemany('INSERT INTO "order" VALUES (?, ?)', [("big", 1234567.0), ("bigger", 1234568.0), ("tiny", 0.125)])
    cases = ((1234567.0, [("bigger",)]), (0.1, [("big",), ("bigger",), ("tiny",)]), (20.0, [("big",), ("bigger",)]))
    for value, expected in cases:
        sql = render_sql(QueryPlan("order", "list", ("order_id",), filters=(Compare("cost usd", ">", value),),
                                   order_by=(Order("order_id"),)))
        assert con.execute(sql).fetchall() == expected, sql
    assert "> 20 " in render_sql(QueryPlan("order", "list", ("order_id",), filters=(Compare("cost usd", ">", 20.0),))) + " "


def test_a_sum_of_money_kept_as_double_is_added_as_decimals_and_passes_the_guard():
    con = duckdb.connect()
    con.execute('CREATE TABLE fees (fee_ref VARCHAR, "amount paid" DOUBLE)')
    amounts = [17151.87, 53256.85, 5133.14, 3746.02, 4270.1, 1545.33]
    con.executemany("INSERT INTO fees VALUES (?, ?)", [(f"f{i}", a) for i, a in enumerate(amounts)])
    plan = QueryPlan("fees", "sum", aggregate=Aggregate("sum", "amount paid", decimals=2))
    table = TableInfo("fees", (ColumnInfo("fee_ref", "VARCHAR"), ColumnInfo("amount paid", "DOUBLE")), ("public",))
    guard_sql(render_sql(plan), {"fees": table}, Principal("x").access_scope())
    ((total,),) = con.execute(render_sql(plan)).fetchall()
    assert float(total) == 85103.31 and repr(float(total)) == "85103.31"
    ((as_double,),) = con.execute(render_sql(QueryPlan("fees", "sum", aggregate=Aggregate("sum", "amount paid")))).fetchall()
    assert repr(as_double) == "85103.31000000001"  # what adding the doubles gives


def test_table_nouns_are_read_in_the_singular_and_the_plural():
    from retrieval.sql.words import noun_forms, plural, singular

    assert [singular(w) for w in ("purchases", "categories", "boxes", "statuses", "batches", "glass")] == \
        ["purchase", "category", "box", "status", "batch", "glass"]
    assert [plural(w) for w in ("purchase", "category", "box", "day")] == ["purchases", "categories", "boxes", "days"]
    assert {"purchase", "purchases"} <= noun_forms("purchases") and {"purchase", "purchases"} <= noun_forms("purchase")


def test_a_key_value_of_any_shape_names_its_whole_record():
    from retrieval.sql.schema import ColumnProfile
    from retrieval.sql.translate import Translation, Translator

    kilns = TableInfo("kilns", (ColumnInfo("kiln_name", "VARCHAR"), ColumnInfo("status", "VARCHAR"),
                                ColumnInfo("firings", "INTEGER")), ("public",), id_column="kiln_name")
    profiles = {("kilns", "kiln_name"): ColumnProfile(("ember", "halo")), ("kilns", "status"): ColumnProfile(("cold", "firing"))}
    for question in ("What is the status of kiln halo?", "What is the status of halo?"):
        out = Translator([kilns], profiles, date(2025, 11, 1)).translate(question)
        assert isinstance(out, Translation) and out.explanation == "lookup", (question, out)
        assert out.sql.startswith('SELECT "status", "kiln_name", "firings" FROM kilns WHERE "kiln_name" = \'halo\''), out.sql
