"""A question about a table that the SQL translator declines is never answered silently.

Two generated domains (tests/routes/service/declined_domains.py: a workshop's `repairs`,
which the rule was written against, and a library's `loans`, which it was not), asked
through the whole engine with the real DuckDB catalog and the real offline model. Questions
in words the translator cannot link ("fault", "a concern", "spare part", "renewed") end as an
evidence gap naming the table and those words, never as passages graded sufficient;
questions the translator handles, everyday wording included ("logged", "in euros",
"entries in the repair log concern the lathe"), still get rows; a
question about no table is answered as on an index without tables; and a table or row the
caller may not read changes nothing, exactly as if it did not exist.
"""

from __future__ import annotations

import json
import random
from decimal import Decimal
from datetime import date

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from quarry_client.models import Answer
from retrieval.answer import gap_json, result_json
from retrieval.table_decline import decline_json
from retrieval.types import Principal
from tests.conftest import LiveServer, stable_answer
from tests.routes.service.declined_domains import loans_rows, repairs_rows, write_domains

TODAY = date(2025, 11, 1)
TESS = Principal("tess", ("workshop",))  # reads both tables, not the kiln's repairs (the board's rows)
BO = Principal("bo", ("board",))  # reads every repair
VIC = Principal("vic", ())  # reads the loans table only
# (question, table, words it cannot link): everyday words no column, value or cue explains
DECLINED = [
    ("Which repairs had a fault log?", "repairs", {"fault"}),
    ("Which machines had a warranty claim?", "repairs", {"warranty", "claim"}),  # named by a column, not the table
    ("Which repairs raised a concern?", "repairs", {"concern"}),
    ("What concern was raised about repair RP-1004?", "repairs", {"concern"}),  # one row, by its key
    ("Which press repairs needed a spare part?", "repairs", {"spare", "part"}),
    ("How many repairs were logged between 1 January and 30 June?", "repairs", {"january", "june"}),  # no year
    # the library: a domain the rule was not written against
    ("How many loans were renewed at the riverside branch?", "loans", {"renewed"}),
    ("Which loans had a damaged cover?", "loans", {"cover", "damaged"}),
    ("How many loans did members extend?", "loans", {"extend", "members"}),
    ("Which riverside loans were picked up on Sundays?", "loans", {"picked", "sundays"}),
]
NO_TABLE = ["Can children visit the workshop?", "When does the riverside library open on Sundays?",
            "How often is the grinder oiled?"]


def _index(root, name, embedder, **kw):
    from indexes.snapshot_build import BuildOptions, build_snapshot

    build_snapshot([write_domains(root / f"src-{name}", **kw)], root / name, embedder, BuildOptions(default_acl=("public",)))
    return root / name


@pytest.fixture(scope="module")
def engines(tmp_path_factory, embedder):
    """The full index, and one per reading: without tables, with only the loans table (what
    vic reads), with only the repairs rows the workshop reads (what tess reads)."""
    from retrieval.limits import Limits
    from routes.service.view import open_view

    root = tmp_path_factory.mktemp("declined")
    built = {"full": _index(root, "full", embedder), "no_tables": _index(root, "no_tables", embedder, tables=()),
             "loans_only": _index(root, "loans_only", embedder, tables=("loans",)),
             "workshop_rows": _index(root, "workshop_rows", embedder, reader="group:workshop")}
    # a deadline a busy machine cannot reach, so every interface gives the same answer
    limits = Limits(default_deadline_ms=30000)
    opened = {name: open_view(path, embedder, limits, today=TODAY, plugins=False) for name, path in built.items()}
    yield opened
    for engine in opened.values():
        engine.close()


def ask(engine, question: str, who: Principal = TESS):
    return engine.query(question, who, wait_for_tables=True)


def numbers(result) -> dict:
    """Everything a caller sees of an answer but its trace id and timings, numbers rounded as
    the answer rounds them."""
    r4 = lambda x: round(float(x), 4)  # noqa: E731
    return {
        "status": result.status, "gap": gap_json(result.gap), "stop": result.stop_reason,
        "declined": decline_json(result.declined) if result.declined is not None else None,
        "route": {k: r4(v) for k, v in result.decision.scores.items()}, "chosen": result.decision.chosen,
        "reason": result.decision.reason, "context": [(h.chunk_id, r4(h.score)) for h in result.context],
        "attempts": [(a.plan.route, a.plan.strategy, a.plan.query_text(), len(a.hits), a.error,
                      a.grade.to_json() if a.grade else None) for a in result.attempts],
        "rows": (result.rows.columns, result.rows.rows) if result.rows is not None else None,
    }


@pytest.mark.parametrize(("question", "table", "words"), DECLINED, ids=[q for q, _, _ in DECLINED])
def test_a_declined_question_about_a_table_is_a_gap_naming_the_table_and_its_unlinked_words(engines, question, table,
                                                                                           words):
    result = ask(engines["full"], question)
    assert result.status == "evidence_gap", [a.to_json() for a in result.attempts]
    assert result.declined is not None and result.declined.table == table
    assert words <= set(result.declined.unlinked), result.declined
    assert {f"table:{table}", *(f"unlinked:{w}" for w in words)} <= set(result.gap.missing), result.gap
    assert f"the question is about table {table}" in result.gap.detail
    assert f"sql not used: the question is about table {table}" in result.decision.reason  # the trace says why
    assert not any(a.grade and a.grade.sufficient for a in result.attempts)


def test_passages_that_pass_the_relevance_threshold_are_refused_when_they_lack_the_unlinked_words(engines):
    """The case the check exists for: passages sharing the table's words ("repairs", "machine",
    "riverside", "branch") score as relevant, but none holds "fault log" or "renewed"."""
    engine = engines["full"]
    threshold = engine.policies.grader.threshold
    for question, table in (("Which repairs had a fault log?", "repairs"),
                            ("How many loans were renewed at the riverside branch?", "loans")):
        first = ask(engine, question).attempts[0]
        assert first.plan.route != "sql" and first.hits, question
        assert first.grade.score >= threshold and first.grade.reason == "constraint_unmet", (question, first.to_json())
        assert first.grade.missing[0] == f"table:{table}" and first.grade.p_sufficient == 0.0


def test_questions_the_translator_handles_still_get_rows(engines):
    engine = engines["full"]
    repairs, loans = repairs_rows(random.Random(7)), loans_rows(random.Random(11))
    expected = {
        "How many lathe repairs are still open?": [[sum(1 for r in repairs if (r["machine"], r["status"]) == ("lathe", "open"))]],
        "How many loans at the hillcrest branch are overdue?": [[sum(1 for r in loans if (r["branch"], r["status"])
                                                                    == ("hillcrest", "overdue"))]],
        # everyday words: a verb of recording, money in words, a relation verb before a value
        "How many repairs were logged in March 2025?": [[sum(1 for r in repairs if r["reported_on"].startswith("2025-03")
                                                             and "group:workshop" in r["acl"])]],
        "What was the total repair cost in euros of the press?": [[float(sum(Decimal(r["cost_eur"]) for r in repairs
                                                                             if r["machine"] == "press"))]],
        "How many entries in the repair log concern the lathe?": [[sum(1 for r in repairs if r["machine"] == "lathe")]],
    }
    for question, rows in expected.items():
        result = ask(engine, question)
        assert (result.decision.chosen, result.status, result.declined) == ("sql", "answer_context", None), question
        assert [list(r) for r in result.rows.rows] == rows, question
    record = ask(engine, "What is the status of RP-1007?")
    assert record.decision.chosen == "sql" and record.declined is None
    assert dict(zip(record.rows.columns, record.rows.rows[0], strict=True))["status"] == \
        next(r["status"] for r in repairs if r["repair_id"] == "RP-1007")


@pytest.mark.parametrize("question", NO_TABLE)
def test_a_question_about_no_table_is_answered_as_on_an_index_without_tables(engines, question):
    """Sharing a categorical value with a table ("riverside", "grinder") does not make a question
    about it: the outcome is the one an index without any table gives."""
    with_tables, without = ask(engines["full"], question), ask(engines["no_tables"], question)
    assert with_tables.declined is None and "sql not used" not in with_tables.decision.reason
    outcome = lambda r: (r.status, gap_json(r.gap), [(h.chunk_id, round(h.score, 4)) for h in r.context])  # noqa: E731
    assert outcome(with_tables) == outcome(without)


def test_a_table_the_caller_cannot_read_stays_undetectable(engines):
    """vic reads no repairs: a question about them is answered exactly as on an index that never
    had the table (the loans table, which vic reads, is in both), and nothing names it."""
    for question, table, _ in DECLINED:
        full = ask(engines["full"], question, VIC)
        assert numbers(full) == numbers(ask(engines["loans_only"], question, VIC)), question
        if table == "repairs":
            assert full.declined is None, question
            shown = json.dumps({k: v for k, v in result_json(full).items() if k in ("gap", "route", "declined")})
            assert "repairs" not in shown and "table:" not in shown, question


def test_rows_the_caller_cannot_read_change_no_decline(engines):
    """Only the board reads the kiln's repairs: for tess "kiln" is a word the table cannot link,
    exactly as on an index holding only the rows tess reads, while the board gets its rows."""
    questions = ["How many kiln repairs are open?", "What did the kiln repairs cost in euros?",
                 "Which kiln repairs had a fault log?", *[q for q, table, _ in DECLINED if table == "repairs"]]
    for question in questions:
        assert numbers(ask(engines["full"], question)) == numbers(ask(engines["workshop_rows"], question)), question
    kiln = ask(engines["full"], "How many kiln repairs are open?")
    assert kiln.status == "evidence_gap" and "unlinked:kiln" in kiln.gap.missing
    board = ask(engines["full"], "How many kiln repairs are open?", BO)
    assert board.decision.chosen == "sql" and board.rows is not None and board.declined is None


async def _mcp_call(url: str, key: str, question: str) -> dict:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120) as http:
        async with Client(streamable_http_client(url + "/mcp", http_client=http)) as client:
            result = await client.call_tool("retrieve_context", {"question": question})
            assert not result.is_error
            return result.structured_content


def test_the_decline_reaches_http_the_sql_endpoint_mcp_and_the_tool_dispatcher(engines, tmp_path):
    from routes.server.app import create_app
    from auth.keys import KeyStore
    from routes.service.settings import Settings

    store = KeyStore(tmp_path / "keys.json")
    keys = {"tess": store.add("tess", ["workshop"], ["query"])[0], "vic": store.add("vic", [], ["query"])[0]}
    settings = Settings(index_dir=tmp_path, rate_per_second=1000.0, burst=1000, today=TODAY, default_deadline_ms=30000)
    question = "Which repairs had a fault log?"
    with LiveServer(create_app(settings, engine=engines["full"], keys=store)) as server:
        def post(path: str, body: dict, who: str = "tess") -> dict:
            r = httpx.post(server.url + path, json=body, headers={"Authorization": f"Bearer {keys[who]}"}, timeout=120)
            assert r.status_code == 200, r.text
            return r.json()

        answer = post("/v1/query", {"question": question})
        assert answer["status"] == "evidence_gap" and answer["declined"] == {
            "table": "repairs", "reason": "could not link every word of the question to the schema",
            "unlinked": ["fault"], "missing": ["table:repairs", "unlinked:fault"]}
        assert {"table:repairs", "unlinked:fault"} <= set(answer["gap"]["missing"])
        assert "sql not used" in answer["route"]["reason"]
        assert Answer.model_validate(answer).declined.table == "repairs"  # the client reads it
        translated = post("/v1/sql", {"question": question})
        assert translated["status"] == "declined" and translated["declined"] == answer["declined"]
        dispatched = post("/v1/tools/call", {"call_id": "c1", "name": "retrieve_context",
                                             "arguments": {"question": question}})["result"]
        over_mcp = anyio.run(_mcp_call, server.url, keys["tess"], question)
        for other in (dispatched, over_mcp):  # one answer object behind every interface
            assert stable_answer(other) == stable_answer(answer)
        hidden = post("/v1/query", {"question": question}, who="vic")
        assert hidden["declined"] is None and "repairs" not in json.dumps([hidden["gap"], hidden["route"]])
        assert post("/v1/sql", {"question": question}, who="vic")["declined"]["table"] is None
