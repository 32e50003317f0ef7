"""Feedback from the app on an answer: stored beside the audit row of the question it is about.

An app reports, for an answer's trace id, one verdict: the context `answered` the question,
the context was wrong (`wrong_context`), or the gap was wrong (`wrong_gap`: the corpus does
answer it), optionally naming the documents that answer it. One implementation serves
`POST /v1/feedback`, the function tool and the MCP tool (routes/service/tools.py).

Who gives feedback is the verified caller, never the body. Feedback is accepted only for a
trace id whose audit row says the same principal asked it; any other trace id (unknown, or
someone else's) gets the same `not_found`, so the trace ids of others cannot be probed. The
documents it names must be readable by the caller, else the same `not_found` as an unknown id.
One principal's feedback on one trace replaces its earlier one. `quarry tune --feedback`
reads the rows back as labeled questions (routes/eval/feedback_labels.py).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Literal, get_args

import duckdb
from pydantic import Field, StrictStr

from retrieval.errors import InvalidRequest, NotFound, RetrievalUnavailable
from retrieval.limits import Limits
from retrieval.types import Principal
from routes.service.schemas import FilterValue, Strict
from routes.service.service import Service

FEEDBACK_TOOL = "submit_feedback"
Verdict = Literal["answered", "wrong_context", "wrong_gap"]
VERDICTS: tuple[str, ...] = get_args(Verdict)
# the answer status each verdict is about: a context that answered or was wrong, or a gap that was wrong
VERDICT_STATUS = {"answered": "answer_context", "wrong_context": "answer_context", "wrong_gap": "evidence_gap"}
TRACE_ID = r"^[A-Za-z0-9_.:-]+$"
MAX_TRACE_CHARS = 64

SCHEMA = """
CREATE TABLE IF NOT EXISTS feedback (
    principal VARCHAR NOT NULL, trace_id VARCHAR NOT NULL, ts TIMESTAMPTZ NOT NULL, groups VARCHAR NOT NULL,
    verdict VARCHAR NOT NULL, doc_ids VARCHAR, PRIMARY KEY (principal, trace_id)
)
"""
# The audit row of an answer of the loop (only those carry a stop reason) that was delivered.
ASKED = "FROM audit WHERE trace_id = ? AND principal = ? AND stop_reason IS NOT NULL AND http_status = 200"


def feedback_args(limits: Limits) -> type[Strict]:
    """The feedback body (HTTP) and tool arguments, one model: strict, bounded by `limits`."""

    class FeedbackArgs(Strict):
        trace_id: StrictStr = Field(min_length=1, max_length=MAX_TRACE_CHARS, pattern=TRACE_ID,
                                    description="the trace_id of an answer this caller was given")
        verdict: Verdict = Field(description="answered: the context answered the question; wrong_context: the context "
                                 "did not; wrong_gap: the answer was an evidence gap, yet the documents do answer it")
        doc_ids: list[FilterValue] | None = Field(default=None, min_length=1, max_length=limits.max_k,
                                                  description="the documents that answer the question (optional)")

    return FeedbackArgs


@dataclass(frozen=True)
class FeedbackRow:
    """One feedback row with what the audit row of its answer holds (question text and the
    context's documents only where the audit log keeps them)."""

    principal: str
    groups: tuple[str, ...]
    trace_id: str
    verdict: str
    doc_ids: tuple[str, ...] | None
    question: str | None
    answer_docs: tuple[str, ...] | None


class FeedbackStore:
    """The feedback table of an audit database, on the audit log's own connection (one
    cursor per call, so request threads and the audit writer never share one)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, flush: Callable[[], None] | None = None) -> None:
        self._con = con
        self._flush = flush or (lambda: None)
        self._lock = threading.Lock()  # one writer at a time: a replacement never races another
        con.execute(SCHEMA)

    def asked(self, principal: str, trace_id: str) -> str | None:
        """The status of the answer `principal` was given under `trace_id`, or None. Rows are
        written in the background, so a miss waits for those queued so far and looks again
        (for any trace id not the caller's alike)."""
        for attempt in range(2):
            if attempt:
                self._flush()
            with self._con.cursor() as cur:
                found = cur.execute(f"SELECT outcome {ASKED} LIMIT 1", [trace_id, principal]).fetchall()
            if found:
                return "evidence_gap" if str(found[0][0]).startswith("gap:") else "answer_context"
        return None

    def save(self, principal: Principal, trace_id: str, verdict: str, doc_ids: tuple[str, ...] | None) -> bool:
        """Store one verdict, replacing the principal's earlier one on this trace; True when it did."""
        row = [principal.id, trace_id, datetime.now(timezone.utc), json.dumps(list(principal.groups)), verdict,
               json.dumps(list(doc_ids)) if doc_ids is not None else None]
        with self._lock, self._con.cursor() as cur:
            before = cur.execute("SELECT count(*) FROM feedback WHERE principal = ? AND trace_id = ?",
                                 [principal.id, trace_id]).fetchall()[0][0]
            cur.execute("INSERT OR REPLACE INTO feedback VALUES (?, ?, ?, ?, ?, ?)", row)
        return bool(before)

    def rows(self) -> list[FeedbackRow]:
        """Every feedback row with its answer's audit fields, oldest first (no endpoint lists them:
        `quarry tune --feedback` reads them from the file)."""
        with self._con.cursor() as cur:
            return feedback_rows(cur)


ROWS = """
    SELECT f.principal, f.groups, f.trace_id, f.verdict, f.doc_ids, a.question, a.doc_ids
    FROM feedback f LEFT JOIN (
        SELECT DISTINCT ON (principal, trace_id) principal, trace_id, question, doc_ids FROM audit
        WHERE stop_reason IS NOT NULL AND http_status = 200 ORDER BY principal, trace_id, ts
    ) a ON a.principal = f.principal AND a.trace_id = f.trace_id
    ORDER BY f.ts, f.principal, f.trace_id"""


def feedback_rows(con: duckdb.DuckDBPyConnection) -> list[FeedbackRow]:
    """The feedback rows of an audit database (none when it has no feedback table yet)."""
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if "feedback" not in tables:
        return []
    return [FeedbackRow(p, tuple(json.loads(g)), t, v, _ids(d), q, _ids(ad))
            for p, g, t, v, d, q, ad in con.execute(ROWS).fetchall()]


def _ids(text: str | None) -> tuple[str, ...] | None:
    return tuple(json.loads(text)) if text is not None else None


def give_feedback(service: Service, store: FeedbackStore | None, principal: Principal, args: Any) -> dict[str, Any]:
    """Record `principal`'s verdict on one of its answers (see the module docstring): the
    trace is checked first, so nothing else about another principal's trace is ever said."""
    if store is None:
        raise RetrievalUnavailable("feedback needs the audit log, which this server has not opened")
    status = store.asked(principal.id, args.trace_id)
    if status is None:
        raise NotFound("no answer with this trace id was given to this caller")
    if VERDICT_STATUS[args.verdict] != status:
        kinds = [v for v in VERDICTS if VERDICT_STATUS[v] == status]
        raise InvalidRequest(f"trace {args.trace_id!r} was an {status.replace('_', ' ')}: its verdict is one of "
                             f"{', '.join(kinds)}")
    docs = None
    if args.doc_ids is not None:  # each one readable, in its stored form; an unreadable one is as unknown
        docs = tuple(dict.fromkeys(service.document(principal, d).id for d in args.doc_ids))
    replaced = store.save(principal, args.trace_id, args.verdict, docs)
    return {"trace_id": args.trace_id, "verdict": args.verdict, "doc_ids": list(docs) if docs is not None else None,
            "replaced": replaced}


def read_feedback(path: Path) -> list[FeedbackRow]:
    """The feedback rows of the audit database at `path`. A running server holds that file's
    lock, so when it cannot be opened read-only, a copy of it (and its write-ahead log) is
    read instead: what the server had written when the copy was taken."""
    if not path.is_file():
        raise InvalidRequest(f"no audit database at {path} (the audit_path setting names it)")
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:
        with tempfile.TemporaryDirectory(prefix="quarry-audit-") as folder:
            copy = Path(folder) / path.name
            for part in (path, path.with_name(path.name + ".wal")):
                if part.is_file():
                    shutil.copyfile(part, copy.with_name(part.name))
            con = duckdb.connect(str(copy), read_only=True)
            return _read(con)
    return _read(con)


def _read(con: duckdb.DuckDBPyConnection) -> list[FeedbackRow]:
    try:
        return feedback_rows(con)
    finally:
        con.close()
