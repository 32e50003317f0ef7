"""Error messages say where and what, in the caller's own field names."""

from __future__ import annotations

import httpx

from tests.conftest import PATIENCE_S


def _post(live, path: str, content: bytes, who: str = "alice") -> httpx.Response:
    return httpx.post(live.url + path, content=content, timeout=PATIENCE_S,
                      headers={"Authorization": f"Bearer {live.keys[who]}", "Content-Type": "application/json"})


def test_a_malformed_json_body_is_located_by_line_and_column_and_explained(live):
    r = _post(live, "/v1/query", b'{"question": "Which release fixed INC-2041?",\n "k": 3 "max_attempts": 2}')
    assert r.status_code == 422
    error = r.json()["error"]
    assert error["code"] == "invalid_request"
    message = error["message"]
    assert message.startswith("the body is not valid JSON: Expecting ',' delimiter at line 2, column 9"), message
    assert "JSON decode error" not in message and not message[0].isdigit()


def test_a_body_cut_short_says_so_and_where(live):
    r = _post(live, "/v1/search", b'{"query": "ledger", "retriever": "bm25"')
    assert r.status_code == 422
    assert "at line 1, column 40" in r.json()["error"]["message"], r.json()


def test_a_blank_question_is_named_by_its_field(live):
    for path, body in (("/v1/query", b'{"question": "   "}'), ("/v1/sql", b'{"question": " \\t "}')):
        r = _post(live, path, body)
        assert r.status_code in (400, 422), r.text
        message = r.json()["error"]["message"]
        assert message.startswith("question must not be empty"), (path, message)
    r = _post(live, "/v1/search", b'{"query": "  ", "retriever": "bm25"}')
    assert r.json()["error"]["message"].startswith("query must not be empty")
