"""Row ACLs: every returned row is readable by the principal; aggregates see only those rows.
The oracle reads the CSV itself, independently of DuckDB and the guard."""

from __future__ import annotations

import csv
import json
from concurrent.futures import ThreadPoolExecutor
from datetime import date

import pytest
from hypothesis import given, settings, strategies as st

from retrieval.errors import RetrievalTimeout
from retrieval.retrievers.sql import compare_rows
from retrieval.sql.translate import Decline
from retrieval.types import Principal
from tests.conftest import DEMO, PATIENCE_S, TablesProbe

with (DEMO / "tables" / "tickets.csv").open() as f:
    TICKETS = list(csv.DictReader(f))
USERS = sorted({r["assignee"] for r in TICKETS} | {"alice", "bob", "carol", "dave", "erin", "mallory"})
GROUPS = ["sre", "finance", "security", "hr", "admin", "people", "identity"]


def readable(principal: Principal) -> list[dict]:
    tokens = principal.access_tokens()
    return [r for r in TICKETS if tokens & set(json.loads(r["acl"]))]


principals = st.builds(
    lambda pid, groups: Principal(pid, tuple(groups), frozenset({"query", "sql"})),
    st.sampled_from(USERS),
    st.lists(st.sampled_from(GROUPS), max_size=3, unique=True),
)


@given(principals)
@settings(max_examples=40)
def test_rows_and_aggregates_cover_exactly_the_readable_rows(sql_retriever, principal):
    mine = readable(principal)
    ids = sql_retriever.run_statement("SELECT ticket_id FROM tickets", principal).rows
    assert sorted(r[0] for r in ids) == sorted(r["ticket_id"] for r in mine)
    count, total = sql_retriever.run_statement("SELECT count(*), coalesce(sum(cost_usd), 0) FROM tickets", principal).rows[0]
    assert count == len(mine)
    assert total == pytest.approx(sum(float(r["cost_usd"]) for r in mine))
    per_team = dict(sql_retriever.run_statement("SELECT team, count(*) FROM tickets GROUP BY team", principal).rows)
    expected: dict[str, int] = {}
    for r in mine:
        expected[r["team"]] = expected.get(r["team"], 0) + 1
    assert per_team == expected


@given(principals)
@settings(max_examples=20)
def test_translated_questions_see_only_readable_rows(sql_retriever, principal):
    out = sql_retriever.answer("How many p1 tickets are there?", principal, date(2025, 11, 1))
    expected = sum(1 for r in readable(principal) if r["priority"] == "p1")
    if expected == 0 and isinstance(out, Decline):
        return  # "p1" is not a value this principal can see: declining reveals nothing
    assert out.rows == ((expected,),)


def labeled() -> list[dict]:
    return [json.loads(line) for line in (DEMO / "sql_questions.jsonl").read_text().splitlines() if line.strip()]


GROUPS_OF = {"alice": ("sre",), "bob": ("finance",), "carol": ("security", "sre"), "dave": ("hr",), "erin": (),
             "marcus": ("admin",)}


def test_translator_answers_most_labeled_questions_exactly_and_never_wrongly(sql_retriever):
    exact = wrong = declined = 0
    for q in labeled():
        principal = Principal(q["principal"], GROUPS_OF[q["principal"]])
        out = sql_retriever.answer(q["question"], principal, date.fromisoformat(q["today"]))
        if q["decline"]:
            assert isinstance(out, Decline), f"{q['id']} should be declined, got {getattr(out, 'sql', out)}"
            continue
        if isinstance(out, Decline):
            declined += 1
        elif compare_rows(q["answer_rows"], out.rows, q["ordered"]):
            exact += 1
        else:
            wrong += 1
    answerable = exact + wrong + declined
    assert answerable >= 40
    assert exact / answerable >= 0.85
    assert wrong == 0


def test_translator_declines_words_it_cannot_link(sql_retriever):
    out = sql_retriever.answer("How many incidents made the customers happy in 2025?", Principal("alice", ("sre",)))
    assert isinstance(out, Decline) and {"customers", "happy"} <= set(out.unlinked)
    nothing = sql_retriever.answer("What is the average mood of the dispatch team?", Principal("alice", ("sre",)))
    assert isinstance(nothing, Decline)


def test_translator_links_values_numbers_dates_and_groups(sql_retriever):
    alice = Principal("alice", ("sre",))
    today = date(2025, 11, 1)
    out = sql_retriever.answer("How many ledger releases had more than 20 changes last quarter?", alice, today)
    assert "\"service\" = 'ledger'" in out.sql and '"change_count" > 20' in out.sql
    assert ">= CAST('2025-07-01' AS DATE)" in out.sql and "<= CAST('2025-09-30' AS DATE)" in out.sql
    per_team = sql_retriever.answer("Average resolution hours per team", alice, today)
    assert 'GROUP BY "team"' in per_team.sql and "avg(" in per_team.sql


def test_a_range_whose_first_side_has_no_year_links_the_whole_range_on_the_date_column(sql_retriever):
    alice, today = Principal("alice", ("sre",)), date(2025, 11, 1)
    with (DEMO / "tables" / "incidents.csv").open() as f:
        opened = [r["opened_at"][:10] for r in csv.DictReader(f)]
    for question, start, end in [("How many incidents were opened between July and September 2025?", "2025-07-01", "2025-09-30"),
                                 ("How many incidents were opened in H1 2025?", "2025-01-01", "2025-06-30")]:
        out = sql_retriever.answer(question, alice, today)
        assert not isinstance(out, Decline), (question, out)
        assert f">= CAST('{start}' AS DATE)" in out.sql and f"<= CAST('{end}' AS DATE)" in out.sql, out.sql
        assert out.rows == ((sum(1 for d in opened if start <= d <= end),),), question


def test_compare_rows_allows_extra_columns_but_not_other_values():
    assert compare_rows([["a"], ["b"]], [("b", 2), ("a", 1)])
    assert not compare_rows([["a"], ["b"]], [("a", 1)])
    assert compare_rows([[1.234]], [(1.23,)])
    assert not compare_rows([["a"], ["b"]], [("b",), ("a",)], ordered=True)


def test_concurrent_first_questions_of_a_scope_profile_its_tables_once(sql_retriever, threads):
    from retrieval.retrievers.sql import SqlRetriever

    question, principal = "how many incidents were opened in 2025", Principal("bob", ("finance",)).access_scope()
    alone = TablesProbe(sql_retriever._backend)
    expected = SqlRetriever(alone, sql_retriever.limits, builder=threads).translate(question, principal)
    slow = TablesProbe(sql_retriever._backend, seconds=0.02)
    shared = SqlRetriever(slow, sql_retriever.limits, builder=threads)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: shared.translate(question, principal), range(4)))
    assert alone.statements > 0 and slow.statements == alone.statements
    assert all(r == expected for r in results)


def test_questions_arriving_during_a_profile_build_share_it_and_its_failure(sql_retriever, threads):
    from retrieval.retrievers.sql import SqlRetriever

    question, principal = "how many incidents were opened in 2025", Principal("bob", ("finance",)).access_scope()
    failing = TablesProbe(sql_retriever._backend, held=True, error=RetrievalTimeout("statement timed out"))
    shared = SqlRetriever(failing, sql_retriever.limits, builder=threads)
    try:
        tables = shared.readable_tables(principal)
        build = shared._profile_build(principal, tables)
        assert shared._profile_build(principal, tables) is build  # a second first question joins it
        assert not shared.profile_ready(principal, 0.05)  # not ready yet, and still that one build
        failing.release.set()
        with pytest.raises(RetrievalTimeout):
            build.result(timeout=PATIENCE_S)
        assert failing.statements == 1  # one build; every waiter got its error
        with pytest.raises(RetrievalTimeout):
            shared.translate(question, principal)  # a later question starts a new build
        assert failing.statements == 2
    finally:
        failing.release.set()
        shared.close()


# A second domain's tables (tests/fixtures/trial/tables): hospital requests and building permits.
ERIN = Principal("erin")


def _answer(engine, question):
    return engine.sql.answer(question, ERIN, date(2025, 11, 1))


def test_a_status_word_used_as_a_verb_is_not_read_as_the_status(trial_engine):
    # "open" is a status value, but "did radiology open" asks when requests were opened
    opened = _answer(trial_engine, "How many requests did Radiology open in Q1 2025?")
    assert opened.rows == ((4,),), opened.sql
    assert "status" not in opened.sql
    assert _answer(trial_engine, "How many open requests does radiology have?").rows == ((2,),)
    assert _answer(trial_engine, "How many radiology requests are open?").rows == ((2,),)
    assert _answer(trial_engine, "How many requests did pharmacy close in March 2025?").rows == ((1,),)


def test_a_value_word_that_could_also_name_a_column_is_declined_when_nothing_tells(trial_engine):
    out = _answer(trial_engine, "How many radiology requests open in Q1 2025?")
    assert isinstance(out, Decline) and "open" in out.unlinked


def test_a_lookup_by_identifier_returns_the_record_with_its_document(trial_engine):
    out = _answer(trial_engine, "What was decided on permit BP-2202?")
    assert out.columns[0] == "decided_on"
    assert {"permit_id", "status", "doc_id"} <= set(out.columns)
    row = dict(zip(out.columns, out.rows[0], strict=True))
    assert (row["status"], row["doc_id"]) == ("refused", "notice-bp-2202")
    assert out.doc_ids == ("notice-bp-2202",)


def test_the_profile_cache_is_bounded_by_bytes_as_well_as_by_scopes(sql_retriever, threads):
    """Profiles are kept per access scope; their byte budget evicts the least recent scope
    even when the count of scopes would allow more (and a budget that fits keeps both)."""
    from retrieval.retrievers.sql import SqlRetriever, _profiles_size

    question = "how many incidents were opened in 2025"
    bob, alice = Principal("bob", ("finance",)).access_scope(), Principal("alice", ("sre",)).access_scope()
    probe = SqlRetriever(TablesProbe(sql_retriever._backend), sql_retriever.limits, builder=threads)
    sizes = []
    for p in (bob, alice):
        probe.translate(question, p)
        sizes.append(_profiles_size(probe.scope(p), probe._profiles.get(probe.scope(p))))
    probe.close()
    assert probe.scope(bob) != probe.scope(alice) and min(sizes) > 1000
    for budget, both in ((sum(sizes) + 1000, True), (max(sizes) + 300, False)):
        shared = SqlRetriever(TablesProbe(sql_retriever._backend), sql_retriever.limits, profile_cache=256,
                              profile_cache_bytes=budget, builder=threads)
        try:
            for p in (bob, alice):
                shared.translate(question, p)
            assert shared.profiled(alice) and shared.profiled(bob) is both
            assert shared.profile_builds == 2 and shared._profiles.nbytes <= budget
        finally:
            shared.close()


def test_profiles_larger_than_the_whole_budget_are_still_kept_for_their_scope(sql_retriever, threads):
    from retrieval.retrievers.sql import SqlRetriever

    question, bob = "how many incidents were opened in 2025", Principal("bob", ("finance",)).access_scope()
    shared = SqlRetriever(TablesProbe(sql_retriever._backend), sql_retriever.limits, profile_cache_bytes=100,
                          builder=threads)
    try:
        shared.translate(question, bob)
        shared.translate(question, bob)
        assert shared.profiled(bob) and shared.profile_builds == 1 and len(shared._profiles) == 0
    finally:
        shared.close()


def test_a_column_of_numbers_written_as_text_is_profiled_by_their_length_over_readable_rows(tmp_path, embedder, threads):
    """`digits` is read by DuckDB over the rows a scope may read, and a noun with a number that
    long links to that column ("ship 4471"); a column whose numbers differ in length has none."""
    from indexes.catalog import Catalog
    from indexes.snapshot_build import build_snapshot
    from indexes.snapshot_load import current_snapshot_path
    from indexes.sql_runner import SqlRunner
    from retrieval.retrievers.sql import SqlLimits, SqlRetriever

    src = tmp_path / "tables"
    src.mkdir()
    rows = [("S-1", "4471", "12", '["public"]'), ("S-2", "4471", "7", '["public"]'), ("S-3", "5120", "140", '["public"]'),
            ("S-4", "61", "3", '["group:ops"]')]  # only ops reads the two-digit vessel
    lines = [f'{a},{b},{c},"{acl.replace(chr(34), 2 * chr(34))}"' for a, b, c, acl in rows]
    (src / "sailings.csv").write_text("sailing_id,vessel_no,berth,acl\n" + "\n".join(lines) + "\n")
    (src / "sailings.acl.json").write_text(json.dumps({"acl": ["public"], "key": "sailing_id",
                                                       "types": {"vessel_no": "VARCHAR", "berth": "VARCHAR"}}))
    build_snapshot([src], tmp_path / "index", embedder)
    catalog = Catalog(current_snapshot_path(tmp_path / "index") / "catalog.duckdb")
    retriever = SqlRetriever(SqlRunner(catalog, watchdogs=threads), SqlLimits(max_rows=1000, timeout_s=5.0), builder=threads)
    try:
        reader, ops = (Principal(n, g, frozenset({"query"})) for n, g in (("rosa", ()), ("omar", ("ops",))))
        tables = retriever.readable_tables(reader.access_scope())
        profiles = retriever._profiles_for(reader.access_scope(), tables)
        assert profiles[("sailings", "vessel_no")].digits == 4 and profiles[("sailings", "berth")].digits is None
        assert retriever._profiles_for(ops.access_scope(), tables)[("sailings", "vessel_no")].digits is None
        out = retriever.answer("How many sailings did ship 4471 make?", reader, date(2025, 11, 1))
        assert not isinstance(out, Decline) and list(out.rows) == [(2,)], out
        # for ops (vessel numbers of two lengths) "4471" is one of the few values the column holds, linked as such
        seen = retriever.answer("How many sailings did ship 4471 make?", ops, date(2025, 11, 1))
        assert not isinstance(seen, Decline) and list(seen.rows) == [(2,)], seen
    finally:
        retriever.close()
        catalog.close()
