"""Wiring: load the model and the current snapshot once, build retrievers and the loop over them."""

from __future__ import annotations

import json
import logging
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path

from indexes.catalog import SqlRunner
from indexes.embedder import Embedder
from indexes.snapshot import Snapshot, load_snapshot
from retrieval.answer_level import AnswerConfig, AnswerScores, RerankConfig
from retrieval.calls import CallPool
from retrieval.entities import EntityIndex
from retrieval.errors import InvalidRequest
from retrieval.grader import GraderConfig
from retrieval.limits import Limits, check_filters, check_k, check_query
from retrieval.linking import EntityLinker, TableLinker
from retrieval.loop import Budget, LoopDeps, LoopResult, Understood, run_loop, understand
from retrieval.policy import FeatureRouter, Policy, SignalGrader
from retrieval.registry import ROW_ROUTES
from retrieval.retrievers import Retriever
from retrieval.retrievers.bm25 import Bm25Retriever
from retrieval.retrievers.dense import DenseRetriever
from retrieval.retrievers.exact import ExactRetriever
from retrieval.retrievers.hybrid import FusionParams, HybridRetriever
from retrieval.retrievers.sql import SqlRetriever
from retrieval.router import RouterConfig
from retrieval.signals import HitScorer
from retrieval.types import Filters, Principal
from routes.plugins import load_policy
from routes.settings import Settings

log = logging.getLogger("quarry.engine")
TUNED_CONFIG = "tuned.json"  # written by `quarry tune` into the index directory


def build_retrievers(snapshot: Snapshot, embedder: Embedder, fusion: FusionParams = FusionParams(),
                     settings: Settings | None = None, today: date | None = None,
                     side: Executor | None = None) -> dict[str, Retriever]:
    """The retrievers over one snapshot; `settings` sizes the SQL route (limits, slots, profiles)."""
    settings = settings or Settings()
    bm25 = Bm25Retriever(snapshot.bm25, snapshot.chunks)
    dense = DenseRetriever(snapshot.dense, embedder.encode_query, snapshot.chunks)
    runner = SqlRunner(snapshot.catalog, settings.sql_max_concurrent, settings.sql_max_result_bytes)
    return {
        "exact": ExactRetriever(snapshot.catalog, snapshot.chunks),
        "bm25": bm25,
        "dense": dense,
        "hybrid": HybridRetriever(bm25, dense, fusion, side),
        "sql": SqlRetriever(runner, settings.sql_limits, today, settings.profile_cache_size, settings.profile_workers),
    }


@dataclass(frozen=True)
class Policies:
    """Router, grader and fusion parameters: defaults, or what `quarry tune` fitted."""

    router: RouterConfig = field(default_factory=RouterConfig)
    grader: GraderConfig = field(default_factory=GraderConfig)
    fusion: FusionParams = field(default_factory=FusionParams)
    answer: AnswerConfig = field(default_factory=AnswerConfig)  # the answer grader's, when it is used
    answer_model: str | None = None  # sha256 of the answer model `answer` was fitted with
    rerank: RerankConfig | None = None  # what `quarry tune` chose for the answer reranker
    rerank_model: str | None = None  # sha256 of the answer model it was chosen with

    @classmethod
    def load(cls, index_dir: Path, fusion: FusionParams = FusionParams()) -> Policies:
        """What `quarry tune` saved in the index, else the defaults with `fusion` (the settings')."""
        path = index_dir / TUNED_CONFIG
        if not path.is_file():
            return cls(fusion=fusion)
        data = json.loads(path.read_text())
        tuned = data.get("fusion") or {}
        answer, rerank = data.get("answer"), data.get("rerank")
        return cls(RouterConfig.from_json(data["router"]), GraderConfig.from_json(data["grader"]),
                   FusionParams(rrf_k=int(tuned.get("rrf_k", fusion.rrf_k)), depth=int(tuned.get("depth", fusion.depth)),
                                weights=dict(tuned.get("weights", fusion.weights)),
                                method=str(tuned.get("method", fusion.method))),
                   AnswerConfig.from_json(answer["config"]) if answer else AnswerConfig(),
                   answer["model_sha256"] if answer else None,
                   RerankConfig.from_json(rerank["config"]) if rerank else None, rerank["model_sha256"] if rerank else None)


@dataclass
class Engine:
    """Everything a request needs, built once per process and passed in."""

    snapshot: Snapshot
    embedder: Embedder
    retrievers: dict[str, Retriever]
    limits: Limits
    policies: Policies
    titles: EntityIndex
    names: EntityIndex
    calls: CallPool
    today: date | None = None
    side: ThreadPoolExecutor | None = None  # the dense half of hybrid calls, beside the BM25 half
    policy: Policy | None = None  # the loop's collaborators; None: the built-in ones over `policies`
    answer: AnswerScores | None = None  # the answer model's scores, once a policy asked for them
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

    def with_policy(self, policy: Policy) -> Engine:
        """The same loaded index and threads with other collaborators (plug-ins, tests)."""
        self.policy = policy
        self.deps = replace(self.deps, policy=policy)
        return self

    @property
    def sql(self) -> SqlRetriever:
        return self.retrievers["sql"]  # type: ignore[return-value]

    def understand(self, question: str, principal: Principal, today: date | None = None) -> Understood:
        """How the loop reads this question before retrieving (constraints, route, table link)."""
        return understand(check_query(question, self.limits), principal, self.deps, Filters(), today or self.today)

    def query(self, question: str, principal: Principal, *, k: int | None = None, max_attempts: int | None = None,
              deadline_ms: int | None = None, filters: Filters = Filters(), today: date | None = None) -> LoopResult:
        """Run the loop for one question with validated, capped budgets; `today` overrides the
        engine's date for this question's relative dates (labeled questions carry their own)."""
        lim = self.limits
        attempts = lim.default_attempts if max_attempts is None else max_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or not 1 <= attempts <= lim.max_attempts:
            raise InvalidRequest(f"max_attempts must be an integer from 1 to {lim.max_attempts}")
        deadline = lim.default_deadline_ms if deadline_ms is None else deadline_ms
        if isinstance(deadline, bool) or not isinstance(deadline, int) or not 1 <= deadline <= lim.max_deadline_ms:
            raise InvalidRequest(f"deadline_ms must be an integer from 1 to {lim.max_deadline_ms}")
        budget = Budget(attempts, deadline, min(lim.call_timeout_ms, deadline), check_k(k, lim))
        return run_loop(check_query(question, lim), principal, budget, self.deps, check_filters(filters, lim),
                        today or self.today)

    def close(self) -> None:
        self.calls.shutdown()
        self.sql.close()
        if self.side is not None:
            self.side.shutdown(wait=False, cancel_futures=True)
        self.snapshot.close()


def open_engine(index_dir: Path, embedder: Embedder | None = None, limits: Limits | None = None,
                today: date | None = None, policies: Policies | None = None, settings: Settings | None = None,
                warm: bool = True, plugins: bool = True, answer: AnswerScores | None = None) -> Engine:
    """Load everything once, sized by `settings` (thread pools, caches, SQL and fusion; the
    defaults when None), with the policies the settings name (routes/plugins.py: a policy
    that fails to load stops here; `plugins=False` for commands that run no loop). `limits`,
    `today` and `policies`, when given, replace the settings' (and the index's tuned
    policies); `answer` shares an already loaded answer model and its cache. `warm` loads
    the embedding model and runs one query embedding now, so the first request does not
    spend its deadline importing torch."""
    settings = settings or Settings()
    embedder = embedder or settings.embedder()
    today = today or settings.today
    snapshot = load_snapshot(index_dir, embedder, mask_cache_size=settings.mask_cache_size)
    if warm and len(snapshot.chunks):
        embedder.load().encode_query("warm up")
        embedder.clear_cache()
    policies = policies or Policies.load(index_dir, settings.fusion)
    titles, title_ids, values = snapshot.catalog.entity_names()
    side = ThreadPoolExecutor(max_workers=settings.side_workers, thread_name_prefix="quarry-dense")
    engine = Engine(
        snapshot=snapshot, embedder=embedder,
        retrievers=build_retrievers(snapshot, embedder, policies.fusion, settings, today, side),
        limits=limits or settings.limits, policies=policies,
        titles=EntityIndex.build(titles, title_ids, snapshot.chunks.doc_ids), names=EntityIndex.build(values),
        calls=CallPool(settings.workers, settings.spare_workers), today=today, side=side, answer=answer,
    )
    if not plugins:
        return engine
    try:
        assert engine.policy is not None
        return engine.with_policy(load_policy(settings, engine, engine.policy))
    except BaseException:
        engine.close()
        raise
