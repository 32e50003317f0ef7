"""MCP with the SDK's real client: over stdio (spawning `quarry mcp`) and over Streamable HTTP
against the real server, plus the function-tool dispatcher."""

from __future__ import annotations

import json
import sys

import anyio
import httpx
import httpx2
import pytest
from mcp import Client, MCPError, StdioServerParameters
from prometheus_client.parser import text_string_to_metric_families
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import FINANCE_FACTS, ROOT, counter, grew, metrics_text

BUDGET = "What is the Q3 2025 budget for the payments platform?"
FINANCE_DOC = "note-finance-q3-2025-budget"


async def _http_session(url: str, key: str | None, fn):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx2.AsyncClient(headers=headers, timeout=120) as http:
        async with Client(streamable_http_client(url + "/mcp", http_client=http)) as client:
            return await fn(client)


def over_http(live, who: str | None, fn):
    return anyio.run(_http_session, live.url, live.keys[who] if who else None, fn)


def text_of(result) -> str:
    return json.dumps(result.structured_content) + "".join(getattr(c, "text", "") for c in result.content)


def test_http_lists_tools_by_scope(live):
    async def names(client):
        return sorted(t.name for t in (await client.list_tools()).tools)

    assert over_http(live, "alice", names) == ["get_document", "retrieve_context", "search", "sql_query", "submit_feedback"]
    assert over_http(live, "bob", names) == ["get_document", "retrieve_context", "search", "submit_feedback"]  # no sql scope


def test_http_calls_each_tool(live):
    async def run(client):
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert listed["search"].input_schema["additionalProperties"] is False
        ctx = await client.call_tool("retrieve_context", {"question": "How do I refresh the token-signing secret?"})
        hits = await client.call_tool("search", {"query": "E4012", "retriever": "exact", "k": 3})
        rows = await client.call_tool("sql_query", {"sql": "SELECT count(*) AS n FROM incidents"})
        doc = await client.call_tool("get_document", {"doc_id": "faq-001"})
        return ctx, hits, rows, doc

    ctx, hits, rows, doc = over_http(live, "alice", run)
    assert not any(r.is_error for r in (ctx, hits, rows, doc))
    assert ctx.structured_content["status"] in {"answer_context", "evidence_gap"}
    assert all(h["trust"] == "untrusted_evidence" for h in hits.structured_content["hits"])
    assert rows.structured_content["rows"]["data"] == [[120]]
    assert doc.structured_content["doc_id"] == "faq-001"


def test_http_evidence_gap_is_a_normal_result_and_bad_arguments_are_tool_errors(live):
    async def run(client):
        gap = await client.call_tool("retrieve_context", {"question": BUDGET})
        bad = await client.call_tool("retrieve_context", {"question": "x", "k": True})
        extra = await client.call_tool("search", {"query": "x", "retriever": "bm25", "principal": "bob"})
        rejected = await client.call_tool("sql_query", {"sql": "DROP TABLE incidents"})
        return gap, bad, extra, rejected

    gap, bad, extra, rejected = over_http(live, "alice", run)
    assert not gap.is_error and gap.structured_content["status"] == "evidence_gap"
    assert bad.is_error and bad.structured_content["error"]["code"] == "invalid_arguments"
    assert extra.is_error and "principal" in extra.structured_content["error"]["message"]
    assert rejected.is_error and rejected.structured_content["error"]["code"] == "sql_rejected"


def test_http_without_a_valid_key_is_a_protocol_error(live):
    async def run(client):
        return await client.list_tools()

    for who in (None,):
        with pytest.RaisesGroup(MCPError, flatten_subgroups=True):  # the SDK's task groups wrap it
            over_http(live, who, run)
    r = httpx.post(live.url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                   headers={"Authorization": "Bearer qk_0000000000_nope", "Accept": "application/json, text/event-stream"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"


def attempts_seen(live) -> float:
    families = text_string_to_metric_families(metrics_text(live))
    return next(s.value for f in families if f.name == "quarry_attempts" for s in f.samples if s.name == "quarry_attempts_count")


def test_tool_calls_over_mcp_and_the_dispatcher_are_audited_and_counted_like_queries(live):
    question = "How do I refresh the token-signing secret?"
    outcomes, routes = counter(live, "quarry_outcomes", "status"), counter(live, "quarry_routes", "route")
    errors, requests = counter(live, "quarry_errors", "code"), counter(live, "quarry_requests", "endpoint")
    attempts = attempts_seen(live)

    async def run(client):
        answer = await client.call_tool("retrieve_context", {"question": question})
        rejected = await client.call_tool("sql_query", {"sql": "DROP TABLE incidents"})
        return answer, rejected

    answer, rejected = over_http(live, "alice", run)
    assert rejected.is_error
    dispatched = call(live, {"call_id": "a1", "name": "retrieve_context", "arguments": {"question": question}}).json()["result"]
    queried = httpx.post(live.url + "/v1/query", json={"question": question}, timeout=60,
                         headers={"Authorization": f"Bearer {live.keys['alice']}"}).json()

    audit = live.app.state.quarry.audit
    audit.flush()
    rows = {r[1]: r for r in audit.rows(100_000)}
    for endpoint, out in (("/mcp", answer.structured_content), ("/v1/tools/call", dispatched), ("/v1/query", queried)):
        row = rows[out["trace_id"]]
        outcome = out["status"] if not out["gap"] else f"gap:{out['gap']['reason']}"
        assert (row[3], row[4], row[5]) == ("alice", endpoint, 200)
        assert (row[6], row[7], row[8], row[9], row[11]) == (outcome, out["route"]["chosen"], len(out["attempts"]),
                                                             out["stop_reason"], len(question))
    assert any(r[4] == "/mcp" and r[6] == "tool_error:sql_rejected" and r[7] == "tool:sql_query" for r in rows.values())
    assert sum(grew(outcomes, counter(live, "quarry_outcomes", "status")).values()) == 3
    assert sum(grew(routes, counter(live, "quarry_routes", "route")).values()) == 3
    assert attempts_seen(live) - attempts == 3
    assert grew(errors, counter(live, "quarry_errors", "code")) == {"sql_rejected": 1}
    endpoints = grew(requests, counter(live, "quarry_requests", "endpoint"))
    assert endpoints.get("/mcp", 0) >= 2 and "unmatched" not in endpoints


def test_http_foreign_origin_is_refused(live):
    r = httpx.post(live.url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                   headers={"Authorization": f"Bearer {live.keys['alice']}", "Origin": "https://evil.example",
                            "Accept": "application/json, text/event-stream"})
    assert r.status_code in (400, 403)


def test_no_tool_gives_alice_bobs_private_finance_evidence(live):
    async def run(client):
        results = [
            await client.call_tool("retrieve_context", {"question": BUDGET, "k": 20}),
            await client.call_tool("search", {"query": "Q3 2025 budget payments platform", "retriever": "hybrid", "k": 50}),
            await client.call_tool("search", {"query": "budget", "retriever": "exact", "k": 50}),
            await client.call_tool("get_document", {"doc_id": FINANCE_DOC}),
            await client.call_tool("sql_query", {"sql": "SELECT ticket_id FROM tickets WHERE team = 'finance'"}),
            await client.call_tool("retrieve_context",
                                   {"question": "finance team budget", "filters": {"doc_ids": [FINANCE_DOC]}}),
        ]
        return results

    results = over_http(live, "alice", run)
    for r in results:
        shown = text_of(r)
        assert not any(fact in shown for fact in FINANCE_FACTS), shown[:300]
        if not r.is_error:
            assert f'"doc_id": "{FINANCE_DOC}"' not in shown
    assert results[3].is_error and results[3].structured_content["error"]["code"] == "not_found"
    assert results[4].structured_content["rows"]["data"] == []  # finance rows are outside alice's row ACL

    async def as_bob(client):
        return await client.call_tool("get_document", {"doc_id": FINANCE_DOC})

    assert not over_http(live, "bob", as_bob).is_error  # the document exists: only alice may not see it


def test_injected_instructions_come_back_as_data_and_change_nothing(live):
    async def run(client):
        return await client.call_tool("search", {"query": '"ignore previous instructions"', "retriever": "exact", "k": 10})

    result = over_http(live, "erin", run)
    hits = result.structured_content["hits"]
    assert hits and all(h["trust"] == "untrusted_evidence" for h in hits)
    assert any("sql_query" in h["text"] for h in hits)
    answer = httpx.post(live.url + "/v1/query", json={"question": "What does the phishing example FAQ tell staff to do?"},
                        headers={"Authorization": f"Bearer {live.keys['erin']}"}, timeout=60).json()
    assert {a["route"] for a in answer["attempts"]} <= {"exact", "bm25", "dense", "hybrid"}  # never sql
    count = httpx.post(live.url + "/v1/sql", json={"sql": "SELECT count(*) FROM tickets"},
                       headers={"Authorization": f"Bearer {live.keys['alice']}"}).json()
    assert count["rows"]["data"][0][0] > 0  # nothing was dropped


@pytest.mark.slow
def test_stdio_server_for_a_fixed_principal(demo_index):
    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT),
                                   args=["-m", "routes.cli.main", "mcp", "--index", str(demo_index), "--principal", "alice",
                                         "--groups", "sre", "--scopes", "query", "sql", "--today", "2025-11-01"])

    async def run():
        async with Client(params, read_timeout_seconds=120) as client:
            names = sorted(t.name for t in (await client.list_tools()).tools)
            ctx = await client.call_tool("retrieve_context", {"question": "How many sev1 incidents were there in 2025?"})
            gap = await client.call_tool("retrieve_context", {"question": BUDGET})
            hits = await client.call_tool("search", {"query": "INC-2041", "retriever": "exact"})
            rows = await client.call_tool("sql_query", {"sql": "SELECT count(*) FROM deployments"})
            doc = await client.call_tool("get_document", {"doc_id": FINANCE_DOC})
            bad = await client.call_tool("search", {"query": "x", "retriever": "nope"})
            return names, ctx, gap, hits, rows, doc, bad

    names, ctx, gap, hits, rows, doc, bad = anyio.run(run)
    assert names == ["get_document", "retrieve_context", "search", "sql_query"]
    assert ctx.structured_content["rows"]["data"] == [[3]]
    assert gap.structured_content["status"] == "evidence_gap"
    assert not any(fact in text_of(gap) for fact in FINANCE_FACTS)
    assert hits.structured_content["hits"]
    assert rows.structured_content["rows"]["data"][0][0] == 120
    assert doc.is_error and doc.structured_content["error"]["code"] == "not_found"
    assert bad.is_error and bad.structured_content["error"]["code"] == "invalid_arguments"


# -- function tools over HTTP ----------------------------------------------------------------

def call(live, body, who: str = "alice") -> httpx.Response:
    return httpx.post(live.url + "/v1/tools/call", json=body, headers={"Authorization": f"Bearer {live.keys[who]}"}, timeout=60)


def test_tool_schemas_in_openai_and_anthropic_shapes(live):
    headers = {"Authorization": f"Bearer {live.keys['alice']}"}
    openai = httpx.get(live.url + "/v1/tools?format=openai", headers=headers).json()["tools"]
    anthropic = httpx.get(live.url + "/v1/tools?format=anthropic", headers=headers).json()["tools"]
    assert {t["function"]["name"] for t in openai} == {t["name"] for t in anthropic} == {
        "retrieve_context", "search", "sql_query", "get_document", "submit_feedback"}
    for t in openai:
        params = t["function"]["parameters"]
        assert t["function"]["strict"] is True and params["additionalProperties"] is False
        assert set(params["required"]) == set(params["properties"])  # strict mode: all listed, optional ones nullable
    retrieve = next(t for t in openai if t["function"]["name"] == "retrieve_context")["function"]["parameters"]
    assert retrieve["properties"]["k"]["maximum"] == 50 and retrieve["properties"]["k"]["type"] == ["integer", "null"]
    sql = next(t for t in anthropic if t["name"] == "sql_query")
    assert "incidents(" in sql["description"] and "tickets(" in sql["description"] and "acl" not in sql["description"]
    bob = httpx.get(live.url + "/v1/tools?format=anthropic", headers={"Authorization": f"Bearer {live.keys['bob']}"}).json()
    assert "sql_query" not in {t["name"] for t in bob["tools"]}
    assert httpx.get(live.url + "/v1/tools?format=xml", headers=headers).status_code == 422


def test_dispatcher_answers_with_the_call_id(live):
    ok = call(live, {"call_id": "c1", "name": "search", "arguments": {"query": "E4012", "retriever": "exact"}}).json()
    assert ok["call_id"] == "c1" and ok["result"]["hits"]
    arguments = json.dumps({"query": "E4012", "retriever": "exact"})
    as_string = call(live, {"call_id": "c2", "name": "search", "arguments": arguments}).json()
    assert as_string["call_id"] == "c2" and as_string["result"] == ok["result"]


@pytest.mark.parametrize("body, who, code", [
    ({"call_id": "u1", "name": "drop_everything", "arguments": {}}, "alice", "unknown_tool"),
    ({"call_id": "u2", "name": "search", "arguments": '{"query": "x", '}, "alice", "invalid_arguments"),
    ({"call_id": "u3", "name": "search", "arguments": "[1, 2]"}, "alice", "invalid_arguments"),
    ({"call_id": "u4", "name": "search", "arguments": {"query": "x", "retriever": "bm25", "extra": 1}},
     "alice", "invalid_arguments"),
    ({"call_id": "u5", "name": "search", "arguments": {"retriever": "bm25"}}, "alice", "invalid_arguments"),
    ({"call_id": "u6", "name": "search", "arguments": {"query": "x", "retriever": "bm25", "k": True}},
     "alice", "invalid_arguments"),
    ({"call_id": "u7", "name": "search", "arguments": {"query": "x", "retriever": "bm25", "k": "5"}},
     "alice", "invalid_arguments"),
    ({"call_id": "u8", "name": "retrieve_context", "arguments": {"question": "x", "filters": {"date_from": "2025-13-01"}}},
     "alice", "invalid_arguments"),
    ({"call_id": "u9", "name": "sql_query", "arguments": {"sql": "SELECT 1"}}, "bob", "access_denied"),
    ({"call_id": "u10", "name": "sql_query", "arguments": {"sql": "SELECT * FROM read_csv('/etc/passwd')"}},
     "alice", "sql_rejected"),
    ({"call_id": "u11", "name": "get_document", "arguments": {"doc_id": FINANCE_DOC}}, "alice", "not_found"),
    ({"call_id": "u12", "name": "search", "arguments": None}, "alice", "invalid_arguments"),
])
def test_dispatcher_rejections_echo_the_call_id(live, body, who, code):
    r = call(live, body, who)
    assert r.status_code == 200
    out = r.json()
    assert out["call_id"] == body["call_id"] and out["error"]["code"] == code and "result" not in out


def test_envelope_without_call_id_is_an_invalid_request(live):
    r = call(live, {"name": "search", "arguments": {}})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request"


def test_idle_event_streams_time_out_and_never_lock_the_key_out(demo_engine, http_keys, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from routes.server.app import create_app
    from routes.service.settings import Settings
    from tests.conftest import LiveServer

    store, keys = http_keys
    settings = Settings(index_dir=tmp_path, max_concurrent_per_key=2, mcp_stream_idle_seconds=1.0)
    headers = {"Authorization": f"Bearer {keys['erin']}", "Accept": "application/json, text/event-stream"}
    with LiveServer(create_app(settings, engine=demo_engine, keys=store)) as server, httpx.Client(timeout=30) as http:
        streams = [http.send(http.build_request("GET", server.url + "/mcp", headers={**headers, "Accept": "text/event-stream"}),
                             stream=True) for _ in range(6)]  # more idle streams than the key may have requests
        try:
            assert [s.status_code for s in streams] == [200] * 6
            listed = http.post(server.url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers)
            assert listed.status_code == 200, listed.text
            with ThreadPoolExecutor(6) as pool:  # each stream ends on its own (a hung one raises ReadTimeout)
                assert list(pool.map(lambda s: s.read(), streams)) == [b""] * 6
        finally:
            for s in streams:
                s.close()
