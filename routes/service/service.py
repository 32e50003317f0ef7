"""The service: every operation an edge (HTTP, MCP, tools, CLI, evaluation) may ask of an
index, typed, over one runtime.

Each call reads the generation current when it starts and holds it until it returns, so a
reload or a write installing another view meanwhile never closes the one it reads. Edges
receive a `Service` and nothing else: they never reach into an index view.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path
from typing import Any, Iterator, Sequence

from starlette.concurrency import run_in_threadpool

from indexes.corpus import make_document
from indexes.stated_date import headings_of
from indexes.embedder import Embedder
from indexes.extract.record import BadFile
from indexes.files import FileKind, file_record
from indexes.live import Change, Delete, Put, SetAcl, current_documents
from indexes.wal import JSONObject
from retrieval.answer_level import AnswerScores
from retrieval.errors import InvalidRequest, NotFound, PayloadTooLarge
from retrieval.limits import Limits, check_query
from retrieval.loop import LoopResult, Understood
from retrieval.retrievers.sql import SqlResult
from retrieval.search import search
from retrieval.sql.schema import TableInfo
from retrieval.sql.translate import Decline
from retrieval.types import Document, Filters, Hit, Principal, check_acl, check_doc_id, normal_doc_id
from routes.service.runtime import Runtime, open_runtime
from routes.service.schemas import DocumentIn
from routes.service.settings import Settings
from routes.service.generations import View
from routes.service.sharded import ShardedView
from routes.service.view import IndexView
from routes.service.write_access import check_target
from routes.service.tuned import Policies

READINESS_PROBE = Principal("quarry-readiness").access_scope()
MAX_DOC_ID_CHARS = 256  # a longer id names no document (ids are checked at write time)


def lookup_ids(doc_id: str) -> list[str]:
    """The ids a read of `doc_id` tries, in order: its normal form (what every write stores), then
    the id as given (a document written before ids were normalised). Too long: none."""
    if len(doc_id) > 4 * MAX_DOC_ID_CHARS:
        return []
    return [i for i in dict.fromkeys((normal_doc_id(doc_id), doc_id)) if len(i) <= MAX_DOC_ID_CHARS]


@dataclass(frozen=True)
class FileBody:
    """A file's bytes as a document body, with the fields its request gave over the file's own."""

    data: bytes
    kind: FileKind
    fields: dict[str, Any]


@dataclass(frozen=True)
class PutWrite:
    """Create or replace `doc_id` from a document's fields or a file."""

    doc_id: str
    body: DocumentIn | FileBody
    origin: str = "api"


@dataclass(frozen=True)
class DeleteWrite:
    doc_id: str


@dataclass(frozen=True)
class AclWrite:
    doc_id: str
    acl: Sequence[str]


Write = PutWrite | DeleteWrite | AclWrite


class Service:
    """The typed operations over one runtime (see the module docstring)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    @classmethod
    def open(cls, settings: Settings, index_dir: Path | None = None, writable: bool = False, **view_options: Any) -> Service:
        """The service of a command over the index of `index_dir` (default: the settings'),
        loaded now; its caller closes it. See `open_runtime` for `writable` and `view_options`."""
        return cls(open_runtime(settings, index_dir, writable, **view_options))

    @classmethod
    def serving(cls, view: View, settings: Settings | None = None) -> Service:
        """The service over one ready view that stays its caller's to close (tests,
        benchmarks and commands that built it themselves)."""
        return cls(Runtime(settings or (view.settings if isinstance(view, IndexView) else None) or Settings(), view))

    def close(self) -> None:
        """Close the runtime: once, by whoever opened it (a command, the app's lifespan)."""
        self.runtime.close()

    @property
    def settings(self) -> Settings:
        return self.runtime.settings

    @property
    def limits(self) -> Limits:
        return self.runtime.settings.limits

    # -- reading ------------------------------------------------------------------------

    def query(self, principal: Principal, question: str, *, k: int | None = None, max_attempts: int | None = None,
              deadline_ms: int | None = None, filters: Filters = Filters(), today: date | None = None,
              wait_for_tables: bool = False) -> LoopResult:
        """The loop for one question: an answer context or a typed evidence gap."""
        with self.runtime.lease() as view:
            return view.query(question, principal, k=k, max_attempts=max_attempts, deadline_ms=deadline_ms,
                              filters=filters, today=today, wait_for_tables=wait_for_tables)

    def understand(self, principal: Principal, question: str, today: date | None = None) -> Understood:
        """How the loop reads a question before retrieving (constraints, route, table link)."""
        with self.runtime.lease() as view:
            return view.understand(question, principal, today)

    def search(self, principal: Principal, retriever: str, query: str, k: int | None = None,
               filters: Filters = Filters()) -> list[Hit]:
        """One retriever's ranking, validated against the limits."""
        with self.runtime.lease() as view:
            return search(view.retrievers, retriever, query, principal, k, filters, view.limits)

    def candidates(self, principal: Principal, retriever: str, query: str, depth: int) -> list[Hit]:
        """A retriever's ranking to `depth`, past the request limits: for offline fitting only."""
        with self.runtime.lease() as view:
            return view.retrievers[retriever].search(query, principal.access_scope(), depth, Filters())

    def sql_statement(self, principal: Principal, statement: str) -> SqlResult:
        """One read-only SELECT under the principal's table and row access (needs the sql scope)."""
        with self.runtime.lease() as view:
            return view.sql.run_statement(statement, principal)

    def sql_question(self, principal: Principal, question: str, today: date | None = None) -> SqlResult | Decline:
        """A question translated to SQL over the readable tables: rows, or a typed decline."""
        with self.runtime.lease() as view:
            return view.sql.answer(check_query(question, view.limits, "question"), principal, today or view.today)

    def readable_tables(self, principal: Principal) -> list[TableInfo]:
        with self.runtime.lease() as view:
            return view.sql.readable_tables(principal.access_scope())

    def tables_ready(self, principal: Principal, seconds: float | None = None) -> bool:
        """Build (or wait for) the principal's table profiles; False when it reads no table."""
        with self.runtime.lease() as view:
            access = principal.access_scope()
            if view.deps.tables is None or not view.deps.tables.readable(access):
                return False
            return view.sql.profile_ready(access, seconds)

    def document(self, principal: Principal, doc_id: str) -> Document:
        """One document the principal may read; NotFound otherwise, exactly as for a missing id."""
        with self.runtime.lease() as view:
            doc = None
            for key in lookup_ids(doc_id):
                doc = view.document(key, principal.access_scope())
                if doc is not None:
                    break
        if doc is None:
            raise NotFound(f"no document {doc_id[:80]!r}")
        return doc

    def can_read(self, principal: Principal, doc_id: str) -> bool:
        with self.runtime.lease() as view:
            acl = view.document_acl(doc_id)
        return acl is not None and principal.can_read(acl)

    @property
    def policies(self) -> Policies:
        """The router, grader and fusion parameters the served view runs with."""
        with self.runtime.lease() as view:
            return view.policies

    @property
    def today(self) -> date | None:
        """The date relative dates refer to when a question gives none (None: the clock's)."""
        with self.runtime.lease() as view:
            return view.today

    # -- offline: evaluation and tuning ---------------------------------------------------

    @property
    def embedder(self) -> Embedder:
        """The loaded embedding model (to index a derived corpus with the same model)."""
        with self.runtime.lease() as view:
            return view.embedder

    @property
    def answer_scores(self) -> AnswerScores | None:
        """The answer model's scores, when a policy loaded it (tuning fits over them)."""
        with self.runtime.lease() as view:
            return view.answer

    @property
    def index_dir(self) -> Path:
        with self.runtime.lease() as view:
            if view.index_dir is None:
                raise NotFound("this view was opened over shards in process, from no index folder")
            return view.index_dir

    def document_acl(self, doc_id: str) -> tuple[str, ...] | None:
        """A document's ACL whoever asks (None: no such document): evaluation checks with it
        that nothing returned was unreadable. Never an answer to a caller."""
        with self.runtime.lease() as view:
            return view.document_acl(doc_id)

    @contextmanager
    def sibling(self, index_dir: Path | None = None, policies: Policies | None = None, settings: Settings | None = None,
                answer: AnswerScores | None = None) -> Iterator[Service]:
        """A service over `index_dir` (default: this one's) with `policies` (default: that
        index's), sharing this one's loaded models, closed when the block ends."""
        with self.runtime.lease() as view:
            embedder, shared_answer, limits, today = view.embedder, view.answer, view.limits, view.today
        with open_service(settings or self.settings, index_dir or self.index_dir, embedder=embedder, limits=limits,
                          today=today, policies=policies, answer=answer or shared_answer) as other:
            yield other

    # -- writing ------------------------------------------------------------------------

    @property
    def writable(self) -> bool:
        return self.runtime.writer is not None

    def default_acl(self) -> tuple[str, ...]:
        """The ACL a written document gets without one: the index's ingest default."""
        served = self.runtime.generations.current
        if served is None:
            return ("group:admin",)
        return served.engine.default_acl()

    def change(self, write: Write, owner: str | None = None) -> Change:
        """A write request as a checked change (the same rules as an ingest of it). A file
        body is extracted in the runtime's extraction workers, counted against `owner`'s
        share of them, its text bounded by the largest write body."""
        if isinstance(write, DeleteWrite):
            return Delete(check_doc_id(write.doc_id))
        if isinstance(write, AclWrite):
            return SetAcl(check_doc_id(write.doc_id), check_acl(list(write.acl)))
        body, acl = write.body, self.default_acl()
        if isinstance(body, FileBody):
            try:
                got = self.runtime.resources.extractors.extract(body.data, body.kind, owner,
                                                                max_chars=self.settings.write_max_body_bytes)
            except BadFile as e:  # a file over its extraction budget is too large a body; any other is a bad one
                error = PayloadTooLarge if e.reason in ("too_large", "too_slow") else InvalidRequest
                raise error(f"{e.reason}: {e.message}") from None
            record, _ = file_record(got.fields(), [body.fields], got.text, headings_of(got.regions))
            doc = make_document({**record, "id": write.doc_id, "text": got.text}, default_source=None, default_acl=acl)
            return Put(replace(doc, regions=got.regions), write.origin)
        fields = body.model_dump(exclude_none=True)
        if normal_doc_id(fields.pop("id", write.doc_id)) != write.doc_id:
            raise InvalidRequest(f"the body's id differs from the path's {write.doc_id[:80]!r}")
        return Put(make_document({**fields, "id": write.doc_id}, default_source=None, default_acl=acl), write.origin)

    def write(self, principal: Principal | None, writes: Sequence[Write], idempotency: tuple[str, bytes] | None = None
              ) -> JSONObject:
        """Apply the writes as one durable record, visible to every request that starts
        after it returns. `principal` None is the local operator (the CLI)."""
        writes = [replace(w, doc_id=check_target(principal, w.doc_id)) for w in writes]  # before a body is parsed
        writer = self.runtime.writable()
        owner = principal.id if principal is not None else None
        raw = sum(len(w.body.data) for w in writes if isinstance(w, PutWrite) and isinstance(w.body, FileBody))
        with writer.quota.admit(owner, raw):  # a file's bytes count before it is extracted
            changes = [self.change(w, owner) for w in writes]  # every change checked before any is written
            return writer.write(changes, principal, idempotency, None, owner)

    def documents(self) -> list[tuple[Document, str]]:
        """Every document the served view holds, with its origin (what `quarry sync` compares
        a folder with); one node's index only."""
        with self.runtime.lease() as view:
            if not isinstance(view, IndexView):
                raise InvalidRequest("a sharded index is kept in step by ingesting it again; sync serves one node's index")
            return current_documents(view.base or view.snapshot, view.live)

    def write_changes(self, changes: Sequence[Change]) -> JSONObject:
        """Changes an operator built from files (the CLI's upsert): applied as one record."""
        return self.runtime.writable().write(list(changes), None)

    async def compact(self) -> JSONObject:
        """Fold the live changes into a new base snapshot now, and serve it at once."""
        runtime = self.runtime
        writer = runtime.compactable()
        with runtime.lease() as view:
            embedder = view.embedder
        out = await run_in_threadpool(writer.compact, embedder)
        if out["status"] == "compacted":  # serve the new base now, not at the next poll
            if runtime.reloader is not None:
                await runtime.reloader.check()
            elif runtime.generations.current is not None:
                await run_in_threadpool(writer.rebase, runtime.reopen)
        return out

    def compact_now(self) -> JSONObject:
        """`compact` for a command (no event loop, no reloader): the fold alone."""
        writer = self.runtime.compactable()
        with self.runtime.lease() as view:
            return writer.compact(view.embedder)

    # -- operations ---------------------------------------------------------------------

    def probe(self) -> None:
        """Answer one retrieval call (readiness); raises when the index does not answer."""
        with self.runtime.lease() as view:
            view.retrievers["bm25"].search("readiness", READINESS_PROBE, 1, Filters())

    def shard_stats(self) -> list[dict[str, Any]]:
        """Per shard of a sharded index's front, its call counts ([] on one node)."""
        served = self.runtime.generations.current
        return served.engine.shard_stats() if served is not None and isinstance(served.engine, ShardedView) else []

    def describe(self) -> dict[str, Any]:
        """The generation served (number, snapshot, counts), its shards' call counts on a
        sharded index's front, and the reloader's state, for admins."""
        served = self.runtime.generations.current
        body: dict[str, Any] = served.describe() if served is not None else {}
        shards = self.shard_stats()
        if shards:
            body["shards"] = shards
        if self.runtime.reloader is not None:
            body["reload"] = self.runtime.reloader.describe()
        return body


@contextmanager
def open_service(settings: Settings, index_dir: Path | None = None, writable: bool = False, **view_options: Any
                 ) -> Iterator[Service]:
    """The service of a command over the index of `index_dir` (default: the settings'),
    closed when the block ends; see `open_runtime` for `writable` and `view_options`."""
    service = Service.open(settings, index_dir, writable, **view_options)
    try:
        yield service
    finally:
        service.close()
