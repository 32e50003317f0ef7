"""Fuzzing every endpoint and tool with arbitrary JSON (odd types, deep nesting, lone
surrogates, huge numbers, unknown fields) over a real server: never a 5xx, always the error
shape, and the server keeps answering."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

pytestmark = pytest.mark.slow  # fuzzing a live server

# Text as JSON can carry it: any code point, lone surrogates included (and often; hypothesis's
# own text strategy never makes them, so strings are joined from pieces).
TEXT = st.lists(st.characters(codec=None) | st.sampled_from(["\ud800", "\udfff", "a", " ", "INC-2041", "\u00e9"]),
                max_size=12).map("".join)
SCALARS = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False, allow_infinity=False) | TEXT
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4), max_leaves=12)
FIELDS = ["question", "query", "retriever", "k", "max_attempts", "deadline_ms", "filters", "today", "sql", "call_id",
          "name", "arguments", "sources", "doc_ids", "date_from", "date_to", "trace_id", "verdict"]
FILTERS = st.fixed_dictionaries({}, optional={"sources": st.lists(TEXT, max_size=3), "doc_ids": st.lists(TEXT, max_size=3),
                                              "date_from": st.sampled_from(["2024-01-01", "2025-02-30"]) | JSON,
                                              "date_to": st.sampled_from(["2025-12-31", "2025-06-01"]) | TEXT})
# Nearly valid bodies reach deeper than random ones: a real question and filters with odd values.
REAL = st.sampled_from(["ledger", "Which release fixed INC-2041?", "incidents last quarter", "How many p1 tickets are there?"])
WORDS = REAL | REAL | REAL | TEXT  # mostly real questions, so the odd values elsewhere get past the question checks
OPTIONAL = {"k": JSON | st.integers(1, 60), "filters": FILTERS,
            "today": st.sampled_from(["2025-04-15", "2025-02-30"]) | st.just("2025-04-15") | TEXT}
SHAPED = {
    "/v1/query": st.fixed_dictionaries({"question": WORDS, "filters": FILTERS},
                                       optional={"k": OPTIONAL["k"], "today": OPTIONAL["today"]})
    | st.fixed_dictionaries({"question": WORDS}, optional=OPTIONAL),
    "/v1/search": st.fixed_dictionaries({"query": WORDS,
                                         "retriever": st.sampled_from(["exact", "bm25", "dense", "hybrid", "sql"]),
                                         "filters": FILTERS}, optional={"k": OPTIONAL["k"]}),
    "/v1/sql": st.fixed_dictionaries({"question": WORDS}, optional={"today": OPTIONAL["today"]})
    | st.fixed_dictionaries({"sql": st.sampled_from(["SELECT 1", "SELECT count(*) FROM tickets"]) | TEXT}),
    "/v1/feedback": st.fixed_dictionaries({"trace_id": st.sampled_from(["0" * 32, "generation-1"]) | TEXT,
                                           "verdict": st.sampled_from(["answered", "wrong_context", "wrong_gap"]) | TEXT},
                                          optional={"doc_ids": st.lists(st.just("faq-001") | TEXT, max_size=3) | JSON}),
}
BODIES = st.dictionaries(st.sampled_from(FIELDS) | TEXT, JSON, max_size=5) | JSON
TOOLS = st.sampled_from(["retrieve_context", "search", "sql_query", "get_document", "submit_feedback", "nope"]) | TEXT
TOOL_CALLS = st.fixed_dictionaries({"call_id": TEXT, "name": TOOLS,
                                    "arguments": JSON | st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=4)
                                    | SHAPED["/v1/query"] | SHAPED["/v1/search"].map(lambda a: {**a, "retriever": "bm25"})
                                    | SHAPED["/v1/feedback"]
                                    | JSON.map(lambda v: json.dumps(v))})


def _encode(body: object) -> bytes:
    # json.dumps keeps lone surrogates as \\udxxx escapes: valid JSON, invalid Unicode
    return json.dumps(body, allow_nan=False).encode("ascii")


def _check(client: httpx.Client, url: str, path: str, body: object) -> None:
    r = client.post(url + path, content=_encode(body), headers={"Content-Type": "application/json"})
    assert r.status_code < 500, (path, body, r.text)
    out = r.json()
    if r.status_code >= 400:
        assert set(out) == {"error"} and set(out["error"]) == {"code", "message", "retryable"}, out
    elif path == "/v1/tools/call":
        assert ("result" in out) != ("error" in out), out


@pytest.fixture(scope="module")
def client(live):
    with httpx.Client(timeout=30, headers={"Authorization": f"Bearer {live.keys['alice']}"}) as c:
        yield c


@given(data=st.data(), path=st.sampled_from(["/v1/query", "/v1/search", "/v1/sql", "/v1/feedback"]))
@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_arbitrary_bodies_never_get_a_server_error(live, client, data, path):
    _check(client, live.url, path, data.draw(BODIES | SHAPED[path], label="body"))


@given(call=TOOL_CALLS)
@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_arbitrary_tool_calls_never_get_a_server_error(live, client, call):
    _check(client, live.url, "/v1/tools/call", call)


def test_the_server_still_answers_after_the_fuzzing(live, client):
    assert client.get(live.url + "/healthz").status_code == 200
    assert client.post(live.url + "/v1/query", json={"question": "Which release fixed INC-2041?"}).status_code == 200
