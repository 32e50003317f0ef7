"""A sharded view: the loop over a sharded index's shards, answering what one node's index
view answers for the same corpus (status, gap reason, context, scores).

The shards are `Shard`s (retrieval/shard.py): in this process (`LocalShard`, for tests and
a one-machine sharded index) or Ray Serve handles (routes/cluster/). The view holds no
document: only the embedding model (each question is encoded once, here), the shards, the
policies and, when the index has tables, the rows route over the tables shard's catalog
(indexes/shards.py: tables live in shard 00, whole). Every route is its registry entry's
scatter-gather retriever (retrieval/scatter.py); the loop's signals and entity links are
the merged ones of retrieval/scatter_links.py.

A shard that cannot answer makes its call fail with `RetrievalUnavailable`: the loop records
the attempt as failed, and a question none of whose attempts succeeded is a retryable error,
never an evidence gap from the other shards' part of the corpus.
"""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, Callable, Sequence

from indexes.chunking import DEFAULT_MAX_CHARS
from indexes.corpus import ADMIN_ONLY
from indexes.embedder import Embedder
from indexes.live import options_in
from indexes.shards import load_tables, read_cluster, shard_of
from retrieval.answer_level import AnswerScores
from retrieval.errors import InvalidRequest, RetrievalUnavailable, SnapshotError
from retrieval.calls import CallScope
from retrieval.limits import Limits, check_filters, check_query
from retrieval.linking import TableLinker
from retrieval.loop import Budget, LoopDeps, LoopResult, Understood, run_loop, understand
from retrieval.policy import FeatureRouter, Policy, SignalGrader
from retrieval.registry import REGISTRY, ROW_ROUTES, ShardParts, rows_route
from retrieval.retrievers import Retriever
from retrieval.retrievers.sql import SqlRetriever
from retrieval.scatter_links import ShardedLinker, ShardedSignals
from retrieval.shard import Shard
from retrieval.types import AccessScope, Document, Filters, Principal
from routes.service.plugins import INTERFACES
from routes.service.resources import Resources
from routes.service.settings import Settings
from routes.service.tuned import Policies
from routes.service.view import sql_parts


@dataclass
class ShardedView:
    """The loop over `shards` (see the module docstring). `fan_out` calls the shards of one
    step at once (None: one after another); `tables` is the rows route over the tables
    shard's catalog, None when the index has no tables. The caller owns both and closes them."""

    shards: Sequence[Shard]
    embedder: Embedder
    limits: Limits
    policies: Policies
    calls: CallScope
    fan_out: Executor | None = None
    tables: SqlRetriever | None = None
    today: date | None = None
    has_tables: bool = True  # False: the rows route has no table, so routing links none (as one node without tables)
    policy: Policy | None = None  # the loop's collaborators; None: the built-in ones over `policies`
    on_close: Callable[[], None] | None = None  # what `close` lets go (the tables' catalog)
    index_dir: Path | None = None  # the sharded index's folder (None: shards given in process)
    manifest: dict[str, Any] = field(default_factory=dict)  # the cluster manifest served, with a "snapshot" name
    answer: AnswerScores | None = None  # no answer model runs at a front yet
    seq: int = 0  # the index generation: each shard numbers its own writes (routes/service/sharded_writes.py)
    max_chars: int = DEFAULT_MAX_CHARS  # the ingest's chunking, which a written document gets too
    ingest_acl: tuple[str, ...] = ADMIN_ONLY  # the ingest's default ACL, likewise
    side: Executor | None = None  # runs a hybrid call's dense side beside its BM25 side (None: one after the other)
    retrievers: dict[str, Retriever] = field(init=False)
    deps: LoopDeps = field(init=False)

    def __post_init__(self) -> None:
        if self.policy is None:
            self.policy = Policy(FeatureRouter(self.policies.router), SignalGrader(self.policies.grader))
        encode = self.embedder.encode_query
        parts = ShardParts(self.shards, encode, self.policies.fusion, self.fan_out, self.side)
        self.retrievers = {r.name: r.scatter(parts) for r in REGISTRY if r.scatter is not None}
        if self.tables is not None:
            self.retrievers["sql"] = self.tables
        self.deps = LoopDeps(
            retrievers={k: v for k, v in self.retrievers.items() if k not in ROW_ROUTES},
            policy=self.policy,
            linker=ShardedLinker(self.shards, encode, self.fan_out),
            signals=ShardedSignals(self.shards, encode, self.fan_out),
            calls=self.calls,
            tables=TableLinker(self.tables) if self.tables is not None and self.has_tables else None,
            today=lambda: self.today or date.today(),
        )

    def understand(self, question: str, principal: Principal, today: date | None = None) -> Understood:
        """How the loop reads this question before retrieving (as `IndexView.understand`)."""
        return understand(check_query(question, self.limits, "question"), principal, self.deps, Filters(), today or self.today)

    def tables_ready(self, principal: Principal) -> bool:
        """As `IndexView.tables_ready`: wait for the principal's table profiles."""
        tables = self.deps.tables
        if tables is None or not tables.readable(principal.access_scope()):
            return False
        return tables.sql.profile_ready(principal.access_scope(), None)

    def query(self, question: str, principal: Principal, *, k: int | None = None, max_attempts: int | None = None,
              deadline_ms: int | None = None, filters: Filters = Filters(), today: date | None = None,
              wait_for_tables: bool = False) -> LoopResult:
        """Run the loop for one question over the shards (as `IndexView.query`)."""
        if wait_for_tables:
            self.tables_ready(principal)
        budget = Budget.checked(self.limits, k, max_attempts, deadline_ms)
        return run_loop(check_query(question, self.limits, "question"), principal, budget, self.deps,
                        check_filters(filters, self.limits), today or self.today)

    @property
    def sql(self) -> SqlRetriever:
        """The rows route (over the tables shard's catalog, tables or none)."""
        if self.tables is None:
            raise RetrievalUnavailable("this sharded view was opened without its tables shard's catalog")
        return self.tables

    def _owner(self, doc_id: str) -> Shard:
        return self.shards[shard_of(doc_id, len(self.shards))]

    def document(self, doc_id: str, access: AccessScope) -> Document | None:
        """The document from the shard that owns its id, when `access` may read it."""
        return self._owner(doc_id).document(doc_id, access)

    def document_acl(self, doc_id: str) -> tuple[str, ...] | None:
        return self._owner(doc_id).document_acl(doc_id)

    def shard_stats(self) -> list[dict[str, Any]]:
        """Per shard, in order: its number and the call counts its handle keeps, when it keeps
        any (a Ray handle does: calls, retried, unavailable)."""
        out = []
        for i, shard in enumerate(self.shards):
            stats = getattr(shard, "stats", None)
            out.append({"shard": i, **(stats() if callable(stats) else {})})
        return out

    def default_acl(self) -> tuple[str, ...]:
        """The ACL a written document gets without one: the ingest's default."""
        return self.ingest_acl

    def close(self) -> None:
        """Close the rows route and what `on_close` names (never the shards, the threads or
        the model: the caller's)."""
        if self.tables is not None:
            self.tables.close()
        if self.on_close is not None:
            self.on_close()


def open_sharded(index_dir: Path, shards: Sequence[Shard], embedder: Embedder, resources: Resources,
                 settings: Settings | None = None, fan_out: Executor | None = None, limits: Limits | None = None,
                 today: date | None = None) -> ShardedView:
    """The view a front serves over the shards of the sharded index at `index_dir`, in shard
    order: its tables from the tables shard's catalog, opened here alone (indexes/shards.py
    `load_tables`), its policies what `quarry tune` saved beside the cluster manifest (else the
    defaults), sized by `settings` on the threads of `resources`."""
    settings = settings or Settings()
    named = [f"QUARRY_{name.upper()}" for name in INTERFACES if (getattr(settings, name, None) or "").strip()]
    if named:  # a plug-in is built over one node's index view: refused here rather than silently left out
        raise InvalidRequest(f"a sharded index's front runs the built-in policies; unset {', '.join(named)}")
    manifest = read_cluster(index_dir)
    if len(shards) != manifest["shards"]:
        raise SnapshotError(f"{index_dir} has {manifest['shards']} shards, not {len(shards)}")
    if manifest["model"]["id"] != embedder.model_id:
        raise SnapshotError(f"the sharded index was built with {manifest['model']['id']}, not {embedder.model_id}; "
                            "serve it with the same model or ingest again")
    today = today or settings.today
    held = load_tables(index_dir, manifest)
    try:
        tables = rows_route(sql_parts(held.catalog, resources, settings, today), embedder.encode_query)
        served = {**manifest, "snapshot": f"cluster-{manifest['content_hash'][:12]}"}
        max_chars, ingest_acl, _ = options_in(held.manifest)  # every shard is built with the same options
        return ShardedView(shards, embedder, limits or settings.limits, Policies.load(index_dir, settings.fusion),
                           CallScope(resources.call_pool), fan_out, tables, today,
                           has_tables=bool(manifest["counts"].get("tables")), on_close=held.close, index_dir=index_dir,
                           manifest=served, max_chars=max_chars, ingest_acl=ingest_acl,
                           side=resources.side if fan_out is not None else None)
    except BaseException:
        held.close()
        raise
