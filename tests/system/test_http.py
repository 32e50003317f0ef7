"""The HTTP API over a real uvicorn server on loopback, called with httpx."""

from __future__ import annotations

import json
import re
import threading

import httpx
import pytest

from retrieval.errors import RetrievalUnavailable

from routes.server.app import create_app
from auth.keys import KeyStore
from routes.service.settings import Settings
from tests.conftest import (FINANCE_FACTS, PATIENCE_S, LiveServer, StatementLog, TablesProbe, counter, grew, metrics_text,
                            wait_until)

BUDGET = "What is the Q3 2025 budget for the payments platform?"


def auth(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def post(live, path: str, body, key: str | None = "alice", **kw) -> httpx.Response:
    headers = auth(live.keys[key]) if key else {}
    if isinstance(body, (bytes, str)):
        return httpx.post(live.url + path, content=body, headers={**headers, "Content-Type": "application/json"},
                          timeout=30, **kw)
    return httpx.post(live.url + path, json=body, headers=headers, timeout=30, **kw)


def assert_error(r: httpx.Response, status: int, code: str) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "retryable"}
    assert body["error"]["code"] == code
    return body["error"]


def test_readiness_and_metrics_reveal_counts_and_activity_only_to_an_admin_key(live):
    assert httpx.get(live.url + "/healthz").json() == {"status": "ok"}
    assert httpx.get(live.url + "/readyz").json() == {"status": "ready"}  # a load balancer's probe, no key
    assert httpx.get(live.url + "/readyz", headers=auth(live.keys["alice"])).json() == {"status": "ready"}
    assert_error(httpx.get(live.url + "/readyz", headers=auth("qk_0000000000_nope")), 401, "unauthenticated")
    assert_error(httpx.get(live.url + "/metrics"), 401, "unauthenticated")
    assert_error(httpx.get(live.url + "/metrics", headers=auth(live.keys["alice"])), 403, "forbidden")
    ready = httpx.get(live.url + "/readyz", headers=auth(live.keys["ops"])).json()
    assert ready["status"] == "ready" and ready["counts"]["documents"] == 186
    post(live, "/v1/query", {"question": "carrier webhook retries"})
    text = metrics_text(live)
    assert 'quarry_requests_total{endpoint="/v1/query",status="200"}' in text and "quarry_attempts_bucket" in text


def test_errors_are_counted_under_their_own_code(live, demo_engine):
    before = counter(live, "quarry_errors", "code")
    assert_error(post(live, "/v1/query", {"question": "x", "evil": 1}), 422, "invalid_request")
    assert_error(httpx.get(live.url + "/v1/query", headers=auth(live.keys["alice"])), 405, "invalid_request")
    assert_error(post(live, "/v1/query", {"question": "   "}), 400, "invalid_request")
    assert_error(post(live, "/v1/sql", {"sql": "DROP TABLE incidents"}), 400, "sql_rejected")
    assert_error(post(live, "/v1/query", {"question": "x"}, key=None), 401, "unauthenticated")
    assert_error(post(live, "/v1/sql", {"sql": "SELECT 1"}, key="bob"), 403, "forbidden")
    assert_error(httpx.get(live.url + "/v1/nope"), 404, "not_found")
    broken = TablesProbe(demo_engine.sql._backend, error=RetrievalUnavailable("the database is gone"))
    demo_engine.sql._backend = broken
    try:
        unavailable = assert_error(post(live, "/v1/sql", {"sql": "SELECT count(*) FROM incidents"}), 503, "retrieval_unavailable")
    finally:
        demo_engine.sql._backend = broken.inner
    assert unavailable["retryable"] is True
    assert grew(before, counter(live, "quarry_errors", "code")) == {
        "invalid_request": 3, "sql_rejected": 1, "unauthenticated": 1, "forbidden": 1, "not_found": 1,
        "retrieval_unavailable": 1}


def test_two_principals_get_different_answers_to_the_same_question(live):
    bob = post(live, "/v1/query", {"question": BUDGET}, key="bob").json()
    alice = post(live, "/v1/query", {"question": BUDGET}, key="alice").json()
    assert bob["status"] == "answer_context" and bob["context"][0]["doc_id"] == "note-finance-q3-2025-budget"
    assert alice["status"] == "evidence_gap"
    shown = json.dumps(alice)
    assert "note-finance-q3-2025-budget" not in shown
    assert not any(fact in shown for fact in FINANCE_FACTS)
    assert all(c["trust"] == "untrusted_evidence" for c in bob["context"])


def test_missing_malformed_unknown_and_revoked_keys_are_401(live):
    assert_error(post(live, "/v1/query", {"question": "x"}, key=None), 401, "unauthenticated")
    r = httpx.post(live.url + "/v1/query", json={"question": "x"}, headers={"Authorization": "Basic abc"})
    assert_error(r, 401, "unauthenticated")
    r = httpx.post(live.url + "/v1/query", json={"question": "x"}, headers=auth("qk_0000000000_notakey"))
    assert_error(r, 401, "unauthenticated")
    token, rec = live.store.add("mallory", [], ["query"])
    question = {"question": "leave policy"}
    assert httpx.post(live.url + "/v1/query", json=question, headers=auth(token), timeout=30).status_code == 200
    live.store.revoke(rec.key_id)  # no restart: the server re-reads the keys file
    assert_error(httpx.post(live.url + "/v1/query", json=question, headers=auth(token)), 401, "unauthenticated")


def test_a_principal_in_the_body_is_rejected_not_honoured(live):
    assert_error(post(live, "/v1/query", {"question": BUDGET, "principal": "bob"}, key="alice"), 422, "invalid_request")


def test_sending_sql_needs_the_sql_scope(live):
    assert_error(post(live, "/v1/sql", {"sql": "SELECT count(*) FROM incidents"}, key="bob"), 403, "forbidden")
    ok = post(live, "/v1/sql", {"sql": "SELECT count(*) FROM incidents"}, key="alice").json()
    assert ok["status"] == "rows" and ok["rows"]["data"] == [[120]]
    rejected = assert_error(post(live, "/v1/sql", {"sql": "DROP TABLE incidents"}, key="alice"), 400, "sql_rejected")
    assert "DROP" in rejected["message"]


def test_questions_translate_to_sql_with_row_acls(live):
    erin = post(live, "/v1/sql", {"question": "How many p1 tickets are there?"}, key="erin").json()
    bob = post(live, "/v1/sql", {"question": "How many p1 tickets are there?"}, key="bob").json()
    assert erin["rows"]["data"][0][0] < bob["rows"]["data"][0][0]
    declined = post(live, "/v1/sql", {"question": "How many happy customers did we have?"}, key="erin").json()
    assert declined["status"] == "declined" and declined["rows"] is None


def test_unreadable_documents_are_404_exactly_like_missing_ones(live):
    ok = httpx.get(live.url + "/v1/documents/note-finance-q3-2025-budget", headers=auth(live.keys["bob"]))
    assert ok.status_code == 200 and ok.json()["trust"] == "untrusted_evidence"
    hidden = httpx.get(live.url + "/v1/documents/note-finance-q3-2025-budget", headers=auth(live.keys["alice"]))
    missing = httpx.get(live.url + "/v1/documents/note-finance-q3-2025-budgex", headers=auth(live.keys["alice"]))
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json()["error"]["message"].replace("budget", "X") == missing.json()["error"]["message"].replace("budgex", "X")


def test_the_text_of_a_forbidden_document_is_never_read(live, demo_engine):
    """Only its ACL is: a forbidden document costs the same cheap lookup as a missing one, so
    its size cannot show in the timing of /v1/documents or the get_document tool."""
    doc = "note-finance-q3-2025-budget"
    reads_text = re.compile(r"\btext\b", re.IGNORECASE)
    get_document = {"call_id": "d1", "name": "get_document", "arguments": {"doc_id": doc}}
    with StatementLog(demo_engine.snapshot.catalog) as alice:
        hidden = httpx.get(live.url + f"/v1/documents/{doc}", headers=auth(live.keys["alice"]))
        tool = post(live, "/v1/tools/call", get_document, key="alice").json()
    with StatementLog(demo_engine.snapshot.catalog) as bob:
        shown = httpx.get(live.url + f"/v1/documents/{doc}", headers=auth(live.keys["bob"]))
    assert_error(hidden, 404, "not_found")
    assert tool["error"]["code"] == "not_found"
    assert shown.status_code == 200
    assert len(alice.with_param(doc)) == 2 and not any(reads_text.search(sql) for sql in alice.with_param(doc))
    assert any(reads_text.search(sql) for sql in bob.with_param(doc))  # the check sees a text read when there is one


@pytest.mark.parametrize("body, status", [
    ({"question": "x", "evil": 1}, 422),
    ({"question": "x", "k": True}, 422),
    ({"question": "x", "k": "3"}, 422),
    ({"question": "x", "k": 51}, 422),
    ({"question": "x" * 2001}, 422),
    ({"question": 7}, 422),
    ({}, 422),
    ({"question": "x", "filters": {"sources": ["a"], "colour": "red"}}, 422),
    ({"question": "x", "filters": {"date_from": "not a date"}}, 422),
    ({"question": "x", "filters": {"date_from": "2025-02-01", "date_to": "2025-01-01"}}, 400),
    ({"question": "   "}, 400),
    ('{"question": ', 422),
    ("[1, 2]", 422),
    ("", 422),
    (b"\xff1", 422),  # not even text
])
def test_malformed_requests_get_the_error_shape(live, body, status):
    assert_error(post(live, "/v1/query", body), status, "invalid_request")
    if isinstance(body, (str, bytes)):  # a body that is not JSON is rejected alike wherever one is expected
        for path in ("/v1/search", "/v1/sql", "/v1/tools/call"):
            assert_error(post(live, path, body), status, "invalid_request")


def test_oversized_bodies_are_413(live):
    big = json.dumps({"question": "x", "filters": {"doc_ids": ["a" * 100] * 1000}})
    assert_error(post(live, "/v1/query", big), 413, "payload_too_large")


def test_unknown_routes_and_methods_use_the_error_shape(live):
    assert_error(httpx.get(live.url + "/v1/nope"), 404, "not_found")
    assert_error(httpx.get(live.url + "/v1/query", headers=auth(live.keys["alice"])), 405, "invalid_request")


def test_blocking_work_runs_off_the_event_loop(live, demo_engine):
    """While a statement is held inside the database call, the server still answers."""
    held = TablesProbe(demo_engine.sql._backend, held=True)
    demo_engine.sql._backend = held
    done = {}

    def statement():
        done["r"] = post(live, "/v1/sql", {"sql": "SELECT count(*) FROM incidents"}, key="alice")

    t = threading.Thread(target=statement)
    try:
        t.start()
        assert held.entered.wait(timeout=PATIENCE_S)
        assert httpx.get(live.url + "/healthz", timeout=120).status_code == 200  # a blocked event loop would time out
        assert "r" not in done  # the statement is still held
    finally:
        held.release.set()
        t.join(timeout=PATIENCE_S)
        demo_engine.sql._backend = held.inner
    assert done["r"].status_code == 200


def test_rate_limit_answers_429_with_retry_after(demo_engine, http_keys, tmp_path):
    store, keys = http_keys
    settings = Settings(index_dir=tmp_path, rate_per_second=0.001, burst=2)  # no token comes back during the test
    with LiveServer(create_app(settings, engine=demo_engine, keys=store)) as server:
        codes = [httpx.post(server.url + "/v1/search", json={"query": "ledger", "retriever": "bm25"},
                            headers=auth(keys["erin"]), timeout=30) for _ in range(3)]
    assert [c.status_code for c in codes[:2]] == [200, 200]
    assert_error(codes[2], 429, "rate_limited")
    assert int(codes[2].headers["Retry-After"]) >= 1


def test_audit_rows_record_requests_without_question_text(live):
    post(live, "/v1/query", {"question": "How do parents take leave?"}, key="erin")
    post(live, "/v1/query", {"question": "x", "k": 0}, key="erin")
    audit = live.app.state.quarry.audit
    audit.flush()
    rows = [r for r in audit.rows(10_000) if r[3] == "erin"]
    assert any(r[4] == "/v1/query" and r[5] == 200 and r[6] in ("answer_context", "gap:insufficient_evidence",
               "gap:no_authorized_evidence", "gap:constraint_unmet") and r[8] >= 1 for r in rows)
    assert any(r[5] == 422 for r in rows)
    assert all(r[12] is None for r in rows)  # question text is off by default
    assert any(r[11] == len("How do parents take leave?") for r in rows)


@pytest.mark.parametrize("fail_closed", [False, True])
def test_an_audit_log_that_cannot_write_counts_its_dropped_rows_and_fails_open_or_closed_as_set(
        demo_engine, http_keys, tmp_path, fail_closed):
    from routes.service.audit import AuditLog

    store, keys = http_keys
    path = tmp_path / "audit.duckdb"
    AuditLog(path).close()  # the audit database of an earlier run
    settings = Settings(index_dir=tmp_path, audit_path=path, audit_fail_closed=fail_closed)
    app = create_app(settings, engine=demo_engine, keys=store)
    search = lambda: httpx.post(server.url + "/v1/search", json={"query": "ledger", "retriever": "bm25"},  # noqa: E731
                                headers=auth(keys["erin"]), timeout=30)
    with LiveServer(app) as server:
        server.keys = keys
        audit = app.state.quarry.audit
        wal = path.with_name(path.name + ".wal")
        wal.mkdir()  # DuckDB cannot open its write-ahead log: every audit write fails for real
        refused = [search() for _ in range(5)]
        audit.flush()
        dropped = counter(server, "quarry_audit_dropped", "reason")
        wal.rmdir()  # the disk is back
        healed = search()
        audit.flush()
        rows = [r for r in audit.rows() if r[4] == "/v1/search"]
        errors = counter(server, "quarry_errors", "code")
    if fail_closed:
        for r in refused:
            error = assert_error(r, 503, "retrieval_unavailable")
            assert error["retryable"] is True and "audit" in error["message"] and str(tmp_path) not in error["message"]
        assert errors == {"retrieval_unavailable": 5}
    else:
        assert [r.status_code for r in refused] == [200] * 5 and errors == {}
    assert dropped == {"write_failed": 5}
    assert healed.status_code == 200 and [(r[3], r[5]) for r in rows] == [("erin", 200)]  # only the row written


def test_an_unreadable_keys_file_is_a_server_fault_on_every_interface(demo_engine, tmp_path):
    store = KeyStore(tmp_path / "keys.json")
    key = store.add("erin", [], ["query"])[0]
    ops = store.add("prometheus", [], ["admin"])[0]
    mcp_headers = {**auth(key), "Accept": "application/json, text/event-stream"}
    tools_list = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    with LiveServer(create_app(Settings(index_dir=tmp_path), engine=demo_engine, keys=store)) as server:
        search = lambda: httpx.post(server.url + "/v1/search", json={"query": "ledger", "retriever": "bm25"},  # noqa: E731
                                    headers=auth(key), timeout=30)
        assert search().status_code == 200
        bad_key = httpx.post(server.url + "/mcp", json=tools_list, headers={**mcp_headers, "Authorization": "Bearer qk_0_x"})
        good = (tmp_path / "keys.json").read_text()
        (tmp_path / "keys.json").write_text('{"keys": [{"key_id": ')  # a broken file on the server's disk
        http, mcp = search(), httpx.post(server.url + "/mcp", json=tools_list, headers=mcp_headers, timeout=30)
        (tmp_path / "keys.json").write_text(good + "\n")  # repaired, so the admin key reads the metrics
        server.keys = {"ops": ops}
        codes = counter(server, "quarry_errors", "code")
    assert_error(bad_key, 401, "unauthenticated")
    assert bad_key.headers["www-authenticate"] == "Bearer"
    for r in (http, mcp):
        error = assert_error(r, 500, "internal")
        assert "keys.json" not in error["message"] and error["retryable"] is False
    assert codes == {"unauthenticated": 1, "internal": 2}


def test_the_openapi_document_declares_the_bearer_scheme_on_every_keyed_operation(live):
    doc = httpx.get(live.url + "/openapi.json").json()
    scheme = doc["components"]["securitySchemes"]["bearer"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    for path, operations in doc["paths"].items():
        for op in operations.values():
            keyed = path.startswith("/v1/") or path == "/metrics"
            expected = [{"bearer": []}] if keyed else [{"bearer": []}, {}] if path == "/readyz" else None
            assert op.get("security") == expected, path


def test_a_client_that_leaves_mid_body_is_counted_as_closed_not_as_a_server_error(live):
    import socket

    requests, errors = counter(live, "quarry_requests", "status"), counter(live, "quarry_errors", "code")
    with socket.create_connection(("127.0.0.1", live.port)) as s:
        s.sendall(b"POST /v1/query HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Authorization: Bearer " + live.keys["alice"].encode() + b"\r\nContent-Length: 1000\r\n\r\n"
                  b'{"question": ')
    wait_until(lambda: "499" in grew(requests, counter(live, "quarry_requests", "status")),  # the server sees the close
               "the closed request counted")
    assert "500" not in grew(requests, counter(live, "quarry_requests", "status"))
    assert grew(errors, counter(live, "quarry_errors", "code")) == {}


def test_the_docs_page_loads_nothing_from_another_host(live):
    page = httpx.get(live.url + "/docs")
    assert page.status_code == 200 and "SwaggerUIBundle" in page.text
    assert "://" not in page.text  # no absolute URL: no CDN, no online validator
    refs = re.findall(r'(?:src|href)="([^"]+)"', page.text) + re.findall(r"url: '([^']+)'", page.text)
    assert len(refs) == 4 and all(r.startswith("/") and not r.startswith("//") for r in refs)
    for ref in refs:
        asset = httpx.get(live.url + ref)
        assert asset.status_code == 200 and asset.content, ref


def test_a_request_today_moves_relative_dates_and_an_impossible_date_is_invalid(live):
    # the live server's engine date is 2025-11-01; "last quarter" then is Q3 2025
    q = "How many incidents were opened last quarter?"
    default = post(live, "/v1/sql", {"question": q}, key="alice").json()
    moved = post(live, "/v1/sql", {"question": q, "today": "2025-04-15"}, key="alice").json()
    assert "2025-07-01" in default["rows"]["sql"] and "2025-01-01" in moved["rows"]["sql"]
    answer = post(live, "/v1/query", {"question": "incidents opened last quarter", "today": "2025-04-15"}, key="alice").json()
    assert answer["constraints"]["dates"] == [{"text": "last quarter", "from": "2025-01-01", "to": "2025-03-31"}]
    tool = post(live, "/v1/tools/call", {
        "call_id": "c1", "name": "retrieve_context",
        "arguments": {"question": "incidents opened last quarter", "today": "2025-04-15"}}).json()
    assert tool["result"]["constraints"]["dates"][0]["from"] == "2025-01-01"
    assert_error(post(live, "/v1/query", {"question": "x", "today": "2025-02-30"}), 422, "invalid_request")
    bad = assert_error(post(live, "/v1/query", {"question": "What broke on 2025-02-30?"}), 400, "invalid_request")
    assert "2025-02-30" in bad["message"]
