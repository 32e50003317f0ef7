"""Scatter-gather over shards: the same hits, in the same order, as one node over the same corpus.

Pure merging (no index is imported): a front asks every shard (retrieval/shard.py's `Shard`
protocol) for its best k under the caller's access scope and keeps the best k of all.

- **Order.** A single node ranks by score, equal scores by chunk id (`ChunkTable.tiebreak`);
  every shard does the same over its own rows, so the best k overall are among the shards'
  best k each, and sorting their union by (score descending, chunk id) gives the single
  node's list. A chunk belongs to exactly one shard (documents are assigned by id), so the
  union holds no duplicate; one would mean a broken cluster and is refused.
- **BM25** (Elasticsearch's DFS query-then-fetch): first each shard's collection statistics
  over the caller's readable rows, summed (N, total length, each term's df; the sums of
  integers are exact), then each shard scores with the sums. A score is then the one a
  single index of the caller's readable chunks gives (indexes/bm25_index.py), so a
  forbidden chunk on any shard changes no score. Under Robertson's idf a term in more than
  half of one shard's chunks loses its stored term frequency there (as in one snapshot: see
  tests/indexes/test_segments.py); the served default, Lucene's idf, never does.
- **Dense** needs no statistics: the front encodes the query once and every shard scores
  the same vector. Flat (exact float32) shards equal the single node within embedding noise;
  8-bit scans (from 50,000 rows a shard) train their ranges per shard, and HNSW graphs are
  approximate, so there scores can differ by about 1e-3 (indexes/dense_index.py).
- **Exact** scores count occurrences in one chunk: merged as they are.
- **Hybrid** fuses the merged bm25 and dense lists (each `depth` deep, as one node's sides
  are) with the one fusion of retrieval/fusion.py: RRF and z-score see the lists a single
  node's hybrid sees, so they give its order and scores.

`fan_out` (an Executor the composition root owns, or None for one shard after another)
calls the shards concurrently; the merge does not depend on the order answers arrive in.
"""

from __future__ import annotations

from concurrent.futures import Executor
from functools import reduce
from typing import Callable, Iterable, Sequence, TypeVar

import numpy as np

from retrieval.question_scope import carried, remembered
from retrieval.errors import ServerFault
from retrieval.fusion import fuse_hits
from retrieval.retrievers.hybrid import FusionParams
from retrieval.shard import Shard
from retrieval.types import NO_FILTERS, AccessScope, CollectionStats, Filters, Hit

T = TypeVar("T")
NO_STATS = CollectionStats(0, 0.0, {})


def merge_hits(lists: Iterable[Sequence[Hit]], k: int) -> list[Hit]:
    """The best k of the shards' hit lists: score descending, equal scores by chunk id (the
    single node's tie-break). A chunk id found on two shards is a ServerFault."""
    hits = [h for found in lists for h in found]
    if len({h.chunk_id for h in hits}) != len(hits):
        raise ServerFault("two shards returned the same chunk; the cluster's shards overlap")
    return sorted(hits, key=lambda h: (-h.score, h.chunk_id))[: max(k, 0)]


def sum_stats(stats: Iterable[CollectionStats]) -> CollectionStats:
    """The collection statistics of several shards as one collection's."""
    return reduce(lambda a, b: a + b, stats, NO_STATS)


def each(shards: Sequence[Shard], call: Callable[[Shard], T], fan_out: Executor | None) -> list[T]:
    """`call` on every shard, at once on `fan_out`'s threads (each with the caller's context,
    so the question's deadline bounds every shard's call: retrieval/question_scope.py)."""
    if fan_out is None or len(shards) < 2:
        return [call(s) for s in shards]
    return list(fan_out.map(carried(call), shards))


def stats_key(query: str, access: AccessScope) -> tuple[str, str, frozenset[str]]:
    """Where a question's scope remembers the summed statistics of `query` over the rows
    `access` may read, without filters (retrieval/question_scope.py)."""
    return ("stats", query, access.tokens)


def scatter_stats(shards: Sequence[Shard], query: str, access: AccessScope, filters: Filters,
                  fan_out: Executor | None = None) -> CollectionStats:
    """The summed statistics of `query` (one round; none when this question read them already)."""
    def read() -> CollectionStats:
        return sum_stats(each(shards, lambda s: s.bm25_stats(query, access, filters), fan_out))

    return remembered(stats_key(query, access), read) if filters == NO_FILTERS else read()


def scatter_bm25(shards: Sequence[Shard], query: str, access: AccessScope, k: int, filters: Filters,
                 fan_out: Executor | None = None) -> list[Hit]:
    """BM25 over every shard's readable chunks as one collection (two rounds: statistics, then
    scores; one when the question's statistics were read already)."""
    stats = scatter_stats(shards, query, access, filters, fan_out)
    if stats.n == 0 or k <= 0:
        return []
    return merge_hits(each(shards, lambda s: s.bm25(query, access, k, filters, stats), fan_out), k)


def scatter_dense(shards: Sequence[Shard], vector: np.ndarray, access: AccessScope, k: int, filters: Filters,
                  fan_out: Executor | None = None) -> list[Hit]:
    """Dense top k over every shard for one query vector."""
    if k <= 0:
        return []
    return merge_hits(each(shards, lambda s: s.dense(vector, access, k, filters), fan_out), k)


def scatter_exact(shards: Sequence[Shard], query: str, access: AccessScope, k: int, filters: Filters,
                  fan_out: Executor | None = None) -> list[Hit]:
    """Exact matches over every shard."""
    if k <= 0:
        return []
    return merge_hits(each(shards, lambda s: s.exact(query, access, k, filters), fan_out), k)


class ShardedBm25:
    """The bm25 route over shards, with the retriever contract (retrieval/retrievers)."""

    name = "bm25"

    def __init__(self, shards: Sequence[Shard], fan_out: Executor | None = None) -> None:
        self._shards, self._fan_out = list(shards), fan_out

    def search(self, query: str, access: AccessScope, k: int, filters: Filters) -> list[Hit]:
        return scatter_bm25(self._shards, query, access, k, filters, self._fan_out)


class ShardedDense:
    """The dense route over shards: the query is encoded once, here, not on every shard."""

    name = "dense"

    def __init__(self, shards: Sequence[Shard], encode: Callable[[str], np.ndarray], fan_out: Executor | None = None) -> None:
        self._shards, self._encode, self._fan_out = list(shards), encode, fan_out

    def search(self, query: str, access: AccessScope, k: int, filters: Filters) -> list[Hit]:
        return scatter_dense(self._shards, self._encode(query), access, k, filters, self._fan_out)


class ShardedExact:
    """The exact route over shards."""

    name = "exact"

    def __init__(self, shards: Sequence[Shard], fan_out: Executor | None = None) -> None:
        self._shards, self._fan_out = list(shards), fan_out

    def search(self, query: str, access: AccessScope, k: int, filters: Filters) -> list[Hit]:
        return scatter_exact(self._shards, query, access, k, filters, self._fan_out)


class ShardedHybrid:
    """The hybrid route over shards: bm25 and dense merged over every shard, then fused. With
    `side` (an executor apart from the fan-out's, which the dense side's own scatter uses),
    the dense side runs beside the BM25 side, so the route waits one round less."""

    name = "hybrid"

    def __init__(self, lexical: ShardedBm25, semantic: ShardedDense, params: FusionParams = FusionParams(),
                 side: Executor | None = None) -> None:
        self._lexical, self._semantic, self.params, self._side = lexical, semantic, params, side

    def search(self, query: str, access: AccessScope, k: int, filters: Filters) -> list[Hit]:
        depth = max(k, self.params.depth)
        if self._side is None:
            bm25 = self._lexical.search(query, access, depth, filters)
            dense = self._semantic.search(query, access, depth, filters)
        else:
            later = self._side.submit(carried(self._semantic.search), query, access, depth, filters)
            bm25 = self._lexical.search(query, access, depth, filters)
            dense = later.result()
        sides = {self._lexical.name: bm25, self._semantic.name: dense}
        return fuse_hits(sides, self.params.method, self.params.rrf_k, self.params.weights, k)
