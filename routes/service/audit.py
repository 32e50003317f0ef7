"""The audit trail: one row per request in a DuckDB file of the index directory.

Snapshot catalogs are immutable and replaced on every ingest, so the audit log lives beside
them (`<index>/audit.duckdb`) and survives switches. Rows are written by one background
thread in batches; question text and the documents of an answer's context are stored only when
configured (otherwise the question's length). Keys and secrets are never written. The app's
feedback on answers lives in the same database (routes/service/feedback.py).

A row that cannot be written (a full disk, a failing file, a full queue) is dropped, logged
and counted through `on_drop`. Whether its request is still answered is the app's choice
(`audit_fail_closed`): a caller that passes `done` learns whether its row was written.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

import duckdb

from routes.service.feedback import FEEDBACK_TOOL, FeedbackStore
from routes.service.tools import ToolCall

log = logging.getLogger("quarry.audit")

SCHEMA = """
CREATE TABLE IF NOT EXISTS audit (
    ts TIMESTAMPTZ NOT NULL, trace_id VARCHAR NOT NULL, key_id VARCHAR, principal VARCHAR,
    endpoint VARCHAR NOT NULL, http_status INTEGER NOT NULL, outcome VARCHAR, route VARCHAR,
    attempts INTEGER, stop_reason VARCHAR, latency_ms DOUBLE, question_chars INTEGER, question VARCHAR,
    doc_ids VARCHAR, app VARCHAR
)
"""
# A database an earlier version wrote lacks the columns added since.
MIGRATE = ("ALTER TABLE audit ADD COLUMN IF NOT EXISTS doc_ids VARCHAR",
           "ALTER TABLE audit ADD COLUMN IF NOT EXISTS app VARCHAR")
COLUMNS = ("ts, trace_id, key_id, principal, endpoint, http_status, outcome, route, attempts, stop_reason, latency_ms, "
           "question_chars, question, doc_ids, app")


@dataclass(frozen=True)
class AuditRecord:
    trace_id: str
    endpoint: str
    http_status: int
    key_id: str | None = None
    principal: str | None = None
    outcome: str | None = None
    route: str | None = None
    attempts: int | None = None
    stop_reason: str | None = None
    latency_ms: float | None = None
    question: str | None = None
    doc_ids: tuple[str, ...] | None = None  # the documents of an answer's context, in rank order
    app: str | None = None  # an app acting for its user (`principal`): the app's own principal id


def answer_fields(answer: Mapping[str, Any], question: str | None) -> dict[str, Any]:
    """Audit fields of one answer of the loop (the shape HTTP, tools and MCP share)."""
    gap = answer.get("gap")
    return {"outcome": f"gap:{gap['reason']}" if gap else answer["status"], "route": answer["route"]["chosen"],
            "attempts": len(answer["attempts"]), "stop_reason": answer["stop_reason"], "question": question,
            "trace_id": answer["trace_id"], "doc_ids": tuple(dict.fromkeys(c["doc_id"] for c in answer["context"]))}


def tool_fields(call: ToolCall) -> dict[str, Any]:
    """Audit fields of one tool call, the same as those of the HTTP endpoint doing its work."""
    args: Any = call.args
    if call.error is not None:
        return {"outcome": f"tool_error:{call.error.code}", "route": f"tool:{call.name}",
                "question": getattr(args, "question", None) or getattr(args, "query", None)}
    if call.name == "retrieve_context":
        return answer_fields(call.result or {}, args.question)
    if call.name == "search":
        return {"outcome": "hits", "route": args.retriever, "question": args.query}
    if call.name == "sql_query":
        return {"outcome": "rows", "route": "sql"}
    if call.name == FEEDBACK_TOOL:
        return feedback_fields(args)
    return {"outcome": "document"}


def feedback_fields(args: Any) -> dict[str, Any]:
    """Audit fields of a feedback request (its own trace id; the answer's is in the feedback row)."""
    return {"outcome": f"feedback:{args.verdict}", "route": "feedback"}


Done = Callable[[bool], None]  # told, from the writer thread, whether a record was written
Dropped = Callable[[str, int], None]  # (reason, rows) of rows that were not written


class AuditLog:
    def __init__(self, path: Path, keep_questions: bool = False, on_drop: Dropped | None = None) -> None:
        self.keep_questions = keep_questions
        self._on_drop = on_drop or (lambda reason, n: None)
        try:
            self._con = duckdb.connect(str(path))
        except duckdb.IOException:  # another server holds the file: keep a log of our own
            path = path.with_name(f"{path.stem}-{os.getpid()}{path.suffix}")
            log.warning("audit database busy; writing to %s", path)
            self._con = duckdb.connect(str(path))
        self.path = path
        self._con.execute(SCHEMA)
        for statement in MIGRATE:
            self._con.execute(statement)
        self.feedback = FeedbackStore(self._con, self.flush)
        self._queue: queue.Queue[tuple[AuditRecord, Done | None] | threading.Event | None] = queue.Queue(maxsize=10_000)
        self._thread = threading.Thread(target=self._run, name="quarry-audit", daemon=True)
        self._thread.start()

    def record(self, rec: AuditRecord, done: Done | None = None) -> None:
        """Queue one row; `done(written)` is called once it is written or dropped."""
        try:
            self._queue.put_nowait((rec, done))
        except queue.Full:
            log.error("audit queue full; dropping a record for trace %s", rec.trace_id)
            self._on_drop("queue_full", 1)
            if done is not None:
                done(False)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            batch: list[tuple[AuditRecord, Done | None]] = []
            flushes: list[threading.Event] = []
            stop = False
            while True:
                if item is None:
                    stop = True
                    break
                if isinstance(item, threading.Event):
                    flushes.append(item)
                else:
                    batch.append(item)
                if len(batch) >= 500:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            written = self._write([rec for rec, _ in batch])
            for _, done in batch:
                if done is not None:
                    done(written)
            for f in flushes:
                f.set()
            if stop:
                return

    def _write(self, batch: list[AuditRecord]) -> bool:
        if not batch:
            return True
        now = datetime.now(timezone.utc)
        keep = self.keep_questions
        rows = [(now, r.trace_id, r.key_id, r.principal, r.endpoint, r.http_status, r.outcome, r.route, r.attempts,
                 r.stop_reason, r.latency_ms, len(r.question) if r.question is not None else None,
                 r.question if keep else None, json.dumps(list(r.doc_ids)) if keep and r.doc_ids is not None else None, r.app)
                for r in batch]
        try:
            self._con.executemany(f"INSERT INTO audit ({COLUMNS}) VALUES ({', '.join('?' * 15)})", rows)
            return True
        except duckdb.Error as e:  # the detail names the file: the log only
            log.error("could not write %d audit rows: %s", len(rows), e)
            self._on_drop("write_failed", len(rows))
            return False

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until every record queued so far is written (tests and shutdown)."""
        done = threading.Event()
        self._queue.put(done)
        done.wait(timeout)

    def rows(self, limit: int = 1000) -> list[tuple]:
        return self._con.cursor().execute("SELECT * FROM audit ORDER BY ts LIMIT ?", [limit]).fetchall()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)
        self._con.close()
