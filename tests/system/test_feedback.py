"""Feedback on answers over a real uvicorn server: POST /v1/feedback, the function tool and the
MCP tool (the SDK's real client), one implementation stored beside the audit rows."""

from __future__ import annotations

import json
import threading

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from routes.server.app import create_app
from routes.service.settings import Settings
from tests.conftest import LiveServer

BUDGET = "What is the Q3 2025 budget for the payments platform?"
FINANCE_DOC = "note-finance-q3-2025-budget"
SECRET = "How do I refresh the token-signing secret?"


@pytest.fixture(scope="module")
def server(demo_engine, http_keys, tmp_path_factory):
    """A server that keeps question text in its audit log (what tuning from feedback needs)."""
    store, keys = http_keys
    settings = Settings(index_dir=tmp_path_factory.mktemp("feedback-srv"), rate_per_second=1000.0, burst=1000,
                        max_concurrent_per_key=64, audit_questions=True)
    app = create_app(settings, engine=demo_engine, keys=store)
    with LiveServer(app) as live:
        live.keys, live.app = keys, app
        yield live


def headers(live, who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {live.keys[who]}"}


def ask(live, who: str, question: str) -> dict:
    r = httpx.post(live.url + "/v1/query", json={"question": question}, headers=headers(live, who), timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def feedback(live, who: str, body, **kw) -> httpx.Response:
    if isinstance(body, (bytes, str)):
        return httpx.post(live.url + "/v1/feedback", content=body, timeout=30,
                          headers={**headers(live, who), "Content-Type": "application/json"})
    return httpx.post(live.url + "/v1/feedback", json=body, headers=headers(live, who), timeout=30, **kw)


def error_of(r: httpx.Response, status: int, code: str) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "retryable"}
    assert body["error"]["code"] == code
    return body


def stored(live) -> dict[tuple[str, str], object]:
    return {(row.principal, row.trace_id): row for row in live.app.state.quarry.audit.feedback.rows()}


def test_feedback_on_an_own_answer_is_stored_with_its_question_and_context(server):
    answer = ask(server, "bob", BUDGET)
    assert answer["status"] == "answer_context"
    r = feedback(server, "bob", {"trace_id": answer["trace_id"], "verdict": "answered"})
    assert r.status_code == 200, r.text
    assert r.json() == {"trace_id": answer["trace_id"], "verdict": "answered", "doc_ids": None, "replaced": False}
    row = stored(server)[("bob", answer["trace_id"])]
    assert (row.verdict, row.question, row.groups) == ("answered", BUDGET, ("finance",))
    assert row.answer_docs[0] == FINANCE_DOC == answer["context"][0]["doc_id"]


def test_feedback_on_another_principals_answer_is_the_same_404_as_an_unknown_trace(server):
    theirs = ask(server, "bob", BUDGET)["trace_id"]
    other = feedback(server, "alice", {"trace_id": theirs, "verdict": "answered"})
    unknown = feedback(server, "alice", {"trace_id": "0" * 32, "verdict": "answered"})
    assert error_of(other, 404, "not_found") == error_of(unknown, 404, "not_found")
    assert other.content == unknown.content
    assert {k for k in other.headers if k not in ("date", "x-trace-id")} == \
        {k for k in unknown.headers if k not in ("date", "x-trace-id")}
    assert ("alice", theirs) not in stored(server)
    # the trace of a write, of a search or of the feedback request itself is no answer either
    searched = httpx.post(server.url + "/v1/search", json={"query": "E4012", "retriever": "exact"},
                          headers=headers(server, "alice"), timeout=30).json()["trace_id"]
    assert feedback(server, "alice", {"trace_id": searched, "verdict": "answered"}).content == unknown.content


def test_a_second_verdict_on_one_answer_replaces_the_first(server):
    gap = ask(server, "alice", BUDGET)
    assert gap["status"] == "evidence_gap"
    first = feedback(server, "alice", {"trace_id": gap["trace_id"], "verdict": "wrong_gap"})
    assert first.json()["replaced"] is False
    second = feedback(server, "alice", {"trace_id": gap["trace_id"], "verdict": "wrong_gap", "doc_ids": ["faq-001"]})
    assert second.status_code == 200, second.text
    assert second.json() == {"trace_id": gap["trace_id"], "verdict": "wrong_gap", "doc_ids": ["faq-001"], "replaced": True}
    rows = [row for key, row in stored(server).items() if key == ("alice", gap["trace_id"])]
    assert len(rows) == 1 and rows[0].doc_ids == ("faq-001",)


def test_bad_bodies_are_typed_errors(server):
    trace = ask(server, "bob", BUDGET)["trace_id"]
    for body in ({"trace_id": trace, "verdict": "great"}, {"trace_id": trace}, {"verdict": "answered"},
                 {"trace_id": trace, "verdict": "answered", "principal": "alice"},
                 {"trace_id": trace, "verdict": "answered", "doc_ids": []},
                 {"trace_id": trace, "verdict": "answered", "doc_ids": ["x"] * 51},
                 {"trace_id": trace, "verdict": "answered", "doc_ids": "faq-001"},
                 {"trace_id": "x" * 65, "verdict": "answered"}, {"trace_id": "a b", "verdict": "answered"},
                 {"trace_id": 7, "verdict": "answered"}, [trace], "{not json"):
        error_of(feedback(server, "bob", body), 422, "invalid_request")
    error_of(feedback(server, "bob", {"trace_id": trace, "verdict": "answered", "doc_ids": ["d" * 256] * 300}),
             413, "payload_too_large")
    mismatch = error_of(feedback(server, "bob", {"trace_id": trace, "verdict": "wrong_gap"}), 400, "invalid_request")
    assert "answered, wrong_context" in mismatch["error"]["message"]
    error_of(feedback(server, "ops", {"trace_id": trace, "verdict": "answered"}), 403, "forbidden")  # no query scope
    error_of(httpx.post(server.url + "/v1/feedback", json={"trace_id": trace, "verdict": "answered"}), 401,
             "unauthenticated")
    assert ("bob", trace) not in stored(server)


def test_documents_named_must_be_readable_by_the_caller_else_they_are_unknown(server):
    gap = ask(server, "alice", BUDGET)["trace_id"]
    forbidden = feedback(server, "alice", {"trace_id": gap, "verdict": "wrong_gap", "doc_ids": [FINANCE_DOC]})
    body = error_of(forbidden, 404, "not_found")
    unknown = feedback(server, "alice", {"trace_id": gap, "verdict": "wrong_gap", "doc_ids": ["no-such-doc"]})
    assert body["error"]["message"].replace(FINANCE_DOC, "?") == error_of(unknown, 404, "not_found")["error"]["message"] \
        .replace("no-such-doc", "?")
    document = httpx.get(server.url + f"/v1/documents/{FINANCE_DOC}", headers=headers(server, "alice"), timeout=30)
    assert document.json() == body  # exactly what reading the document says
    assert ("alice", gap) not in stored(server)


def test_concurrent_feedback_keeps_one_row_per_answer_and_the_audit_log_whole(server):
    answers = [ask(server, "erin", q) for q in ("leave policy", "carrier webhook retries", BUDGET, "E4012 ledger")]
    fitting = {"answer_context": ("answered", "wrong_context"), "evidence_gap": ("wrong_gap",)}
    sends = [(a["trace_id"], v) for a in answers for v in fitting[a["status"]] for _ in range(4)]
    results: list[httpx.Response] = []

    def send(trace: str, verdict: str) -> None:
        results.append(feedback(server, "erin", {"trace_id": trace, "verdict": verdict}))

    threads = [threading.Thread(target=send, args=sent) for sent in sends]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.status_code for r in results] == [200] * len(sends), [r.text for r in results if r.status_code != 200]
    for a in answers:  # exactly one of the racing requests stored the first verdict; the others replaced it
        firsts = [r for r in results if r.json()["trace_id"] == a["trace_id"] and not r.json()["replaced"]]
        assert len(firsts) == 1
    rows = stored(server)
    assert all(rows[("erin", a["trace_id"])].verdict in fitting[a["status"]] for a in answers)
    audit = server.app.state.quarry.audit
    audit.flush()
    audited = [r for r in audit.rows(100_000) if r[3] == "erin" and str(r[6]).startswith("feedback:")]
    assert len(audited) == len(sends)


def test_the_function_tool_shares_the_endpoint_and_its_errors(server):
    answer = ask(server, "bob", BUDGET)
    listed = httpx.get(server.url + "/v1/tools?format=anthropic", headers=headers(server, "bob"), timeout=30).json()
    schema = next(t for t in listed["tools"] if t["name"] == "submit_feedback")["input_schema"]
    assert schema["properties"]["verdict"]["enum"] == ["answered", "wrong_context", "wrong_gap"]

    def call(who: str, arguments) -> dict:
        r = httpx.post(server.url + "/v1/tools/call", json={"call_id": "c1", "name": "submit_feedback",
                                                            "arguments": arguments}, headers=headers(server, who), timeout=30)
        assert r.status_code == 200, r.text
        return r.json()

    ok = call("bob", {"trace_id": answer["trace_id"], "verdict": "wrong_context", "doc_ids": [FINANCE_DOC]})
    assert ok["result"] == {"trace_id": answer["trace_id"], "verdict": "wrong_context", "doc_ids": [FINANCE_DOC],
                            "replaced": False}
    other = call("alice", {"trace_id": answer["trace_id"], "verdict": "answered"})
    unknown = call("alice", json.dumps({"trace_id": "f" * 32, "verdict": "answered"}))
    assert other["error"] == unknown["error"] and other["error"]["code"] == "not_found"
    assert call("bob", {"trace_id": answer["trace_id"], "verdict": "meh"})["error"]["code"] == "invalid_arguments"
    assert stored(server)[("bob", answer["trace_id"])].verdict == "wrong_context"


async def _mcp(url: str, key: str, fn):
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120) as http:
        async with Client(streamable_http_client(url + "/mcp", http_client=http)) as client:
            return await fn(client)


def test_the_mcp_tool_takes_feedback_on_an_answer_it_gave_and_refuses_anothers(server):
    theirs = ask(server, "bob", BUDGET)["trace_id"]

    async def run(client):
        names = {t.name for t in (await client.list_tools()).tools}
        answer = await client.call_tool("retrieve_context", {"question": SECRET})
        status = answer.structured_content["status"]
        verdict = "answered" if status == "answer_context" else "wrong_gap"
        given = await client.call_tool("submit_feedback", {"trace_id": answer.structured_content["trace_id"],
                                                           "verdict": verdict})
        again = await client.call_tool("submit_feedback", {"trace_id": answer.structured_content["trace_id"],
                                                           "verdict": verdict})
        other = await client.call_tool("submit_feedback", {"trace_id": theirs, "verdict": "answered"})
        unknown = await client.call_tool("submit_feedback", {"trace_id": "e" * 32, "verdict": "answered"})
        bad = await client.call_tool("submit_feedback", {"trace_id": theirs, "verdict": "answered", "extra": 1})
        return names, answer, given, again, other, unknown, bad

    names, answer, given, again, other, unknown, bad = anyio.run(_mcp, server.url, server.keys["alice"], run)
    assert "submit_feedback" in names
    assert not given.is_error and given.structured_content["replaced"] is False
    assert not again.is_error and again.structured_content["replaced"] is True
    assert other.is_error and unknown.is_error
    assert other.structured_content == unknown.structured_content and other.content == unknown.content
    assert other.structured_content["error"]["code"] == "not_found"
    assert bad.is_error and bad.structured_content["error"]["code"] == "invalid_arguments"
    row = stored(server)[("alice", answer.structured_content["trace_id"])]
    assert row.question == SECRET and ("alice", theirs) not in stored(server)
