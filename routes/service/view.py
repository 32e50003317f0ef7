"""An index view: what one served generation answers from (a snapshot, or a base snapshot
with the live changes over it), its retrievers and the loop over them. Views are opened by
the runtime (routes/service/runtime.py) and read through the service; no edge touches one."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any, Callable

from indexes.catalog import Catalog
from indexes.sql_runner import SqlRunner
from indexes.embedder import Embedder
from indexes.live import LiveState, Superseded, live_view, options_of, replay
from indexes.snapshot_load import Snapshot, load_snapshot
from retrieval.answer_level import AnswerScores
from retrieval.calls import CallScope
from retrieval.entities import EntityIndex
from retrieval.limits import Limits, check_filters, check_query
from retrieval.linking import EntityLinker, TableLinker
from retrieval.loop import Budget, LoopDeps, LoopResult, Understood, run_loop, understand
from retrieval.policy import FeatureRouter, Policy, SignalGrader
from retrieval.registry import REGISTRY, ROW_ROUTES, RetrieverParts, SqlParts
from retrieval.retrievers import Retriever
from retrieval.retrievers.hybrid import FusionParams
from retrieval.retrievers.sql import SqlRetriever
from retrieval.signals import HitScorer
from retrieval.types import AccessScope, Document, Filters, Principal
from routes.service.plugins import load_policy
from routes.service.resources import Resources
from routes.service.tuned import Policies
from routes.service.settings import Settings

log = logging.getLogger("quarry.engine")


def build_retrievers(snapshot: Snapshot, embedder: Embedder, resources: Resources, fusion: FusionParams = FusionParams(),
                     settings: Settings | None = None, today: date | None = None,
                     sql: SqlRetriever | None = None) -> dict[str, Retriever]:
    """The retrievers over one snapshot, on the threads of `resources`, one per route of the
    registry, each built by its entry; `settings` sizes the SQL route (limits, slots,
    profiles). `sql` reuses a SQL route (live writes change documents, never tables)."""
    settings = settings or Settings()
    parts = RetrieverParts(snapshot.chunks, snapshot.catalog, snapshot.bm25, snapshot.dense, embedder.encode_query, fusion,
                           resources.side, sql_parts(snapshot.catalog, resources, settings, today))
    reused: dict[str, Retriever] = {} if sql is None else {"sql": sql}
    return {route.name: reused[route.name] if route.name in reused else route.build(parts) for route in REGISTRY}


def sql_parts(catalog: Catalog, resources: Resources, settings: Settings, today: date | None) -> SqlParts:
    """The rows route's parts over the tables of `catalog`, sized by `settings`, on the
    runtime's watchdogs, statement slots and profile threads."""

    def sql_runner() -> SqlRunner:
        return SqlRunner(catalog, settings.sql_max_concurrent, settings.sql_max_result_bytes, settings.sql_memory_mb,
                         settings.sql_threads, watchdogs=resources.watchdogs, slots=resources.sql_slots)

    return SqlParts(sql_runner, settings.sql_limits, today, settings.profile_cache_size, settings.profile_cache_mb << 20,
                    resources.profiles)


class Shared:
    """What every view of one base snapshot shares (the base itself, its Resources, the SQL
    route), closed when the last engine using it closes."""

    def __init__(self, close: Callable[[], None]) -> None:
        self._close, self._users, self._lock = close, 1, threading.Lock()

    def acquire(self) -> None:
        with self._lock:
            if self._users == 0:
                raise RuntimeError("these engine resources are already closed")
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            last = self._users == 0
        if last:
            self._close()


@dataclass
class IndexView:
    """Everything a request needs from one generation: built once, derived per write."""

    snapshot: Snapshot
    embedder: Embedder
    retrievers: dict[str, Retriever]
    limits: Limits
    policies: Policies
    titles: EntityIndex
    names: EntityIndex
    calls: CallScope  # this view's calls on the runtime's call pool
    resources: Resources  # the threads and caches it shares with the views derived from it
    own_resources: bool = True  # False: a runtime's, which it shuts down itself once every view is closed
    today: date | None = None
    policy: Policy | None = None  # the loop's collaborators; None: the built-in ones over `policies`
    answer: AnswerScores | None = None  # the answer model's scores, once a policy asked for them
    base: Snapshot | None = None  # the loaded base snapshot `snapshot` is a live view of (None: itself)
    live: LiveState = field(default_factory=LiveState)  # the changes written since the base was built
    settings: Settings | None = None  # what it was opened with (a derived view loads the same plug-ins)
    plugins: bool = True
    shared: Shared | None = None  # None: this engine alone owns its snapshot and pools
    deps: LoopDeps = field(init=False)

    def __post_init__(self) -> None:
        if self.policy is None:
            self.policy = Policy(FeatureRouter(self.policies.router), SignalGrader(self.policies.grader))
        chunks = self.snapshot.chunks
        has_tables = bool(self.snapshot.catalog.tables())
        self.deps = LoopDeps(
            retrievers={k: v for k, v in self.retrievers.items() if k not in ROW_ROUTES},
            policy=self.policy,
            linker=EntityLinker(self.titles, self.names, chunks, self.snapshot.dense, self.embedder.encode_query),
            signals=HitScorer(self.snapshot.bm25, self.snapshot.dense, self.embedder.encode_query, chunks),
            calls=self.calls,
            tables=TableLinker(self.sql) if has_tables else None,
            today=lambda: self.today or date.today(),
        )

    def with_policy(self, policy: Policy) -> IndexView:
        """The same loaded index and threads with other collaborators (plug-ins, tests)."""
        self.policy = policy
        self.deps = replace(self.deps, policy=policy)
        return self

    @property
    def index_dir(self) -> Path:
        """The index folder this view's snapshot belongs to."""
        return (self.base or self.snapshot).path.parent.parent

    @property
    def manifest(self) -> dict[str, Any]:
        """What /readyz and the generations describe: the served snapshot's manifest."""
        return self.snapshot.manifest

    @property
    def seq(self) -> int:
        """The index generation: the last write-ahead record this view holds."""
        return self.live.seq

    def default_acl(self) -> tuple[str, ...]:
        """The ACL a written document gets without one: the index's ingest default."""
        return options_of(self.base or self.snapshot)[1]

    def document(self, doc_id: str, access: AccessScope) -> Document | None:
        """The document, when it exists and `access` may read it (else None, as for no document)."""
        return self.snapshot.catalog.readable_document(doc_id, access.can_read)

    def document_acl(self, doc_id: str) -> tuple[str, ...] | None:
        return self.snapshot.catalog.document_acl(doc_id)

    @property
    def sql(self) -> SqlRetriever:
        return self.retrievers["sql"]  # type: ignore[return-value]

    @property
    def side(self) -> ThreadPoolExecutor:
        """The threads of the dense half of hybrid calls."""
        return self.resources.side

    def understand(self, question: str, principal: Principal, today: date | None = None) -> Understood:
        """How the loop reads this question before retrieving (constraints, route, table link)."""
        return understand(check_query(question, self.limits, "question"), principal, self.deps, Filters(), today or self.today)

    def tables_ready(self, principal: Principal) -> bool:
        """Build this principal's table profiles, or wait for a build under way, as long as it
        takes. A served question waits at most half its deadline for them and then routes
        without tables; offline commands (eval, tune) have no latency budget, so they call
        this first and every run routes its table questions the same way. False when the
        principal reads no table or the build failed."""
        if self.deps.tables is None or not self.deps.tables.readable(principal.access_scope()):
            return False
        return self.sql.profile_ready(principal.access_scope(), None)

    def query(self, question: str, principal: Principal, *, k: int | None = None, max_attempts: int | None = None,
              deadline_ms: int | None = None, filters: Filters = Filters(), today: date | None = None,
              wait_for_tables: bool = False) -> LoopResult:
        """Run the loop for one question with validated, capped budgets; `today` overrides the
        engine's date for this question's relative dates (labeled questions carry their own).
        `wait_for_tables`: first wait for the principal's table profiles (`tables_ready`),
        outside the deadline."""
        if wait_for_tables:
            self.tables_ready(principal)
        lim = self.limits
        budget = Budget.checked(lim, k, max_attempts, deadline_ms)
        return run_loop(check_query(question, lim, "question"), principal, budget, self.deps, check_filters(filters, lim),
                        today or self.today)

    def derive(self, live: LiveState) -> IndexView:
        """An engine over the same base snapshot with the changes `live` (a write's): it shares
        the base, the models, the thread pools and the SQL route with this one, and only
        builds the delta segment and the retrievers over it (no full rebuild)."""
        base = self.base or self.snapshot
        if self.shared is None:
            raise RuntimeError("only an engine opened with open_view can derive views")
        self.shared.acquire()
        view: Snapshot | None = None
        try:
            settings = self.settings or Settings()
            view = live_view(base, live, settings.mask_cache_size)
            engine = _assemble(view, base, live, self.embedder, self.limits, self.policies, CallScope(self.calls.pool),
                               self.today,
                               self.resources, self.answer, settings, self.plugins, self.shared, sql=self.sql,
                               own_resources=self.own_resources)
        except BaseException:
            if view is not None and view is not base:
                view.close()
            self.shared.release()
            raise
        return engine

    def close(self) -> None:
        if self.shared is None:
            self._close_shared()
            return
        if self.base is not None and self.snapshot is not self.base:
            self.snapshot.close()  # the view's delta segment
        self.shared.release()

    def _close_shared(self) -> None:
        if self.own_resources:
            self.resources.calls.shutdown(wait=False, cancel_futures=True)  # queued retriever calls first
        self.sql.close()  # waits for its statements and profile builds
        if self.own_resources:
            self.resources.shutdown()
        (self.base or self.snapshot).close()


def open_view(index_dir: Path, embedder: Embedder | None = None, limits: Limits | None = None,
                today: date | None = None, policies: Policies | None = None, settings: Settings | None = None,
                warm: bool = True, plugins: bool = True, answer: AnswerScores | None = None,
                resources: Resources | None = None) -> IndexView:
    """Load everything once, sized by `settings` (thread pools, caches, SQL and fusion; the
    defaults when None), with the policies the settings name (routes/service/plugins.py: a policy
    that fails to load stops here; `plugins=False` for commands that run no loop). `limits`,
    `today` and `policies`, when given, replace the settings' (and the index's tuned
    policies); `answer` shares an already loaded answer model and its cache. `warm` loads
    the embedding model and runs one query embedding now, so the first request does not
    spend its deadline importing torch. `resources` are a runtime's threads and caches, which
    it shuts down itself; without them the engine opens its own and shuts them down when its
    last view closes."""
    settings = settings or Settings()
    embedder = embedder or settings.embedder()
    today = today or settings.today
    own = resources is None
    resources = resources or Resources.open(settings)
    try:
        base, live, view = _load_live(index_dir, embedder, settings.mask_cache_size, settings.mask_cache_mb << 20,
                                      resources.walkers)
    except BaseException:
        if own:
            resources.shutdown()
        raise
    try:
        if warm and len(view.chunks):
            embedder.load().encode_query("warm up")
            embedder.clear_cache()
        policies = policies or Policies.load(index_dir, settings.fusion)
        calls = CallScope(resources.call_pool)
        holder: list[IndexView] = []
        shared = Shared(lambda: holder[0]._close_shared())
        engine = _assemble(view, base, live, embedder, limits or settings.limits, policies, calls, today, resources, answer,
                           settings, plugins, shared, own_resources=own)
    except BaseException:
        if own:
            resources.shutdown()
        if view is not base:
            view.close()
        base.close()
        raise
    holder.append(engine)
    return engine


def _load_live(index_dir: Path, embedder: Embedder, mask_cache_size: int, mask_cache_bytes: int, walkers: Executor,
               attempts: int = 5) -> tuple[Snapshot, LiveState, Snapshot]:
    """(base snapshot, the log's changes on it, the view of both). A compaction may switch
    CURRENT and fold the log between loading the base and reading the log: then again."""
    for attempt in range(attempts):
        base = load_snapshot(index_dir, embedder, mask_cache_size=mask_cache_size, mask_cache_bytes=mask_cache_bytes,
                             walkers=walkers)
        try:
            live = replay(index_dir, base, embedder.model_id, embedder.encode)
            return base, live, live_view(base, live, mask_cache_size)
        except Superseded:
            base.close()
            if attempt == attempts - 1:
                raise
        except BaseException:
            base.close()
            raise
    raise AssertionError("unreachable")


def _assemble(view: Snapshot, base: Snapshot, live: LiveState, embedder: Embedder, limits: Limits, policies: Policies,
              calls: CallScope, today: date | None, resources: Resources, answer: AnswerScores | None,
              settings: Settings, plugins: bool, shared: Shared, sql: SqlRetriever | None = None,
              own_resources: bool = True) -> IndexView:
    """The engine over `view` with the given shared parts and the plug-ins the settings name."""
    titles, title_ids, values = view.catalog.entity_names()
    engine = IndexView(
        snapshot=view, embedder=embedder,
        retrievers=build_retrievers(view, embedder, resources, policies.fusion, settings, today, sql),
        limits=limits, policies=policies,
        titles=EntityIndex.build(titles, title_ids, view.chunks.doc_ids, resources.name_keys),
        names=EntityIndex.build(values, memo=resources.name_keys),
        calls=calls, resources=resources, own_resources=own_resources, today=today, answer=answer,
        base=base if view is not base else None, live=live,
        settings=settings, plugins=plugins, shared=shared,
    )
    engine.sql.withdraw(live.docs)  # tables inside files that live writes deleted or replaced
    if not plugins:
        return engine
    assert engine.policy is not None
    try:
        return engine.with_policy(load_policy(settings, engine, engine.policy))
    except BaseException:
        if sql is None:
            engine.sql.close()  # its own; the caller closes the rest
        raise
