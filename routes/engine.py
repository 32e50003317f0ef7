"""Wiring: load the model and the current snapshot once, build the retrievers over them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from datetime import date

from indexes.catalog import SqlRunner
from indexes.embedder import Embedder
from indexes.snapshot import Snapshot, load_snapshot
from retrieval.limits import Limits
from retrieval.retrievers import Retriever
from retrieval.retrievers.bm25 import Bm25Retriever
from retrieval.retrievers.dense import DenseRetriever
from retrieval.retrievers.exact import ExactRetriever
from retrieval.retrievers.hybrid import FusionParams, HybridRetriever
from retrieval.retrievers.sql import SqlLimits, SqlRetriever


def build_retrievers(snapshot: Snapshot, embedder: Embedder, fusion: FusionParams = FusionParams(),
                     sql_limits: SqlLimits = SqlLimits(), today: date | None = None) -> dict[str, Retriever]:
    bm25 = Bm25Retriever(snapshot.bm25, snapshot.chunks)
    dense = DenseRetriever(snapshot.dense, embedder.encode_query, snapshot.chunks)
    return {
        "exact": ExactRetriever(snapshot.catalog, snapshot.chunks),
        "bm25": bm25,
        "dense": dense,
        "hybrid": HybridRetriever(bm25, dense, fusion),
        "sql": SqlRetriever(SqlRunner(snapshot.catalog), sql_limits, today),
    }


@dataclass
class Engine:
    """Everything a request needs, built once per process and passed in."""

    snapshot: Snapshot
    embedder: Embedder
    retrievers: dict[str, Retriever]
    limits: Limits = field(default_factory=Limits)

    @property
    def sql(self) -> SqlRetriever:
        return self.retrievers["sql"]  # type: ignore[return-value]

    def close(self) -> None:
        self.snapshot.close()


def open_engine(index_dir: Path, embedder: Embedder | None = None, limits: Limits = Limits(),
                today: date | None = None) -> Engine:
    embedder = embedder or Embedder()
    snapshot = load_snapshot(index_dir, embedder)
    return Engine(snapshot, embedder, build_retrievers(snapshot, embedder, today=today), limits)
