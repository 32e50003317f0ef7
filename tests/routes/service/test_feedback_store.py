"""The feedback table beside the audit log, on a real DuckDB file: whose answers it accepts,
replacement, the audit database of an earlier version, and reading it while a server holds it."""

from __future__ import annotations

import threading

import duckdb
import pytest

from retrieval.errors import InvalidRequest
from retrieval.types import Principal
from routes.service.audit import AuditLog, AuditRecord
from routes.service.feedback import read_feedback

ALICE = Principal("alice", ("sre",))


def answer(trace: str, principal: str = "alice", outcome: str = "answer_context", **kw) -> AuditRecord:
    return AuditRecord(trace, "/v1/query", 200, principal=principal, outcome=outcome, route="bm25", attempts=1,
                       stop_reason="sufficient", question=kw.pop("question", "carrier webhook retries"), **kw)


@pytest.fixture
def audit(tmp_path):
    log = AuditLog(tmp_path / "audit.duckdb", keep_questions=True)
    yield log
    log.close()


def test_only_answers_the_principal_was_given_are_known(audit):
    audit.record(answer("t-ctx"))
    audit.record(answer("t-gap", outcome="gap:insufficient_evidence"))
    audit.record(AuditRecord("t-search", "/v1/search", 200, principal="alice", outcome="hits", route="exact"))
    audit.record(AuditRecord("t-failed", "/v1/query", 503, principal="alice", stop_reason="attempts_exhausted"))
    store = audit.feedback
    assert store.asked("alice", "t-ctx") == "answer_context"  # found without a flush: a miss waits for queued rows
    assert store.asked("alice", "t-gap") == "evidence_gap"
    assert store.asked("bob", "t-ctx") is None
    assert store.asked("alice", "t-search") is None and store.asked("alice", "t-failed") is None
    assert store.asked("alice", "nope") is None


def test_a_second_verdict_replaces_the_first_even_when_they_race(audit):
    audit.record(answer("t1"))
    audit.flush()
    replaced: list[bool] = []
    threads = [threading.Thread(target=lambda v=v: replaced.append(audit.feedback.save(ALICE, "t1", v, None)))
               for v in ("answered", "wrong_context") * 8]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(replaced) == [False] + [True] * 15
    rows = audit.feedback.rows()
    assert len(rows) == 1 and rows[0].verdict in ("answered", "wrong_context")
    assert rows[0].groups == ("sre",) and rows[0].question == "carrier webhook retries"


def test_question_text_and_context_documents_are_kept_only_when_configured(tmp_path):
    log = AuditLog(tmp_path / "audit.duckdb", keep_questions=False)
    try:
        log.record(answer("t1", doc_ids=("m15", "m01")))
        log.flush()
        log.feedback.save(ALICE, "t1", "answered", None)
        row = log.feedback.rows()[0]
        assert row.question is None and row.answer_docs is None
    finally:
        log.close()
    kept = AuditLog(tmp_path / "audit.duckdb", keep_questions=True)
    try:
        kept.record(answer("t2", doc_ids=("m15", "m01")))
        kept.flush()
        kept.feedback.save(ALICE, "t2", "answered", ("m15",))
        row = next(r for r in kept.feedback.rows() if r.trace_id == "t2")
        assert (row.question, row.answer_docs, row.doc_ids) == ("carrier webhook retries", ("m15", "m01"), ("m15",))
    finally:
        kept.close()


def test_an_audit_database_of_an_earlier_version_gains_the_new_column_and_keeps_its_rows(tmp_path):
    path = tmp_path / "audit.duckdb"
    con = duckdb.connect(str(path))
    con.execute("""CREATE TABLE audit (
        ts TIMESTAMPTZ NOT NULL, trace_id VARCHAR NOT NULL, key_id VARCHAR, principal VARCHAR,
        endpoint VARCHAR NOT NULL, http_status INTEGER NOT NULL, outcome VARCHAR, route VARCHAR,
        attempts INTEGER, stop_reason VARCHAR, latency_ms DOUBLE, question_chars INTEGER, question VARCHAR)""")
    con.execute("INSERT INTO audit VALUES (now(), 'old', NULL, 'alice', '/v1/query', 200, 'answer_context', 'bm25', 1, "
                "'sufficient', 1.0, 5, 'older')")
    con.close()
    log = AuditLog(path, keep_questions=True)
    try:
        log.record(answer("new", doc_ids=("m01",)))
        log.flush()
        assert log.feedback.asked("alice", "old") == "answer_context"
        log.feedback.save(ALICE, "old", "answered", None)
        assert [(r.question, r.answer_docs) for r in log.feedback.rows()] == [("older", None)]
        assert {r[1]: (r[13], r[14]) for r in log.rows()} == {"old": (None, None), "new": ('["m01"]', None)}  # doc_ids, app
    finally:
        log.close()


def test_tuning_reads_the_feedback_of_a_database_a_server_holds(audit, tmp_path):
    audit.record(answer("t1"))
    audit.flush()
    audit.feedback.save(ALICE, "t1", "wrong_context", ("m01",))
    held = read_feedback(audit.path)  # this process holds the file: a copy of it is read
    assert [(r.trace_id, r.verdict, r.doc_ids) for r in held] == [("t1", "wrong_context", ("m01",))]
    assert audit.feedback.asked("alice", "t1") == "answer_context"  # the server's file is untouched
    with pytest.raises(InvalidRequest, match="no audit database"):
        read_feedback(tmp_path / "missing.duckdb")
    bare = tmp_path / "bare.duckdb"
    duckdb.connect(str(bare)).close()
    assert read_feedback(bare) == []
