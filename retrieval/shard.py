"""One shard of a sharded index, as a scatter-gather front (retrieval/scatter.py) calls it.

A shard holds the documents whose ids hash to it (indexes/shards.py) as a normal snapshot.
Every call takes the caller's `AccessScope`, never a row mask, and the shard turns it into
its own mask (`ChunkTable.mask`) and enforces it before anything is counted or ranked, so
the same calls can cross a process or machine boundary (a Ray Serve replica, routes/cluster/)
with nothing but plain values: strings, the scope, filters, a query vector, statistics and
hits.

BM25 takes two calls, as Elasticsearch's DFS query-then-fetch does: `bm25_stats` returns
the shard's share of the collection statistics over the caller's readable rows (N, total
length, each query term's df), the front sums them over every shard, and `bm25` scores the
shard's rows with the sums. Dense and exact need one call: their scores depend on the chunk
and the query alone.

`LocalShard` is the in-process implementation over one loaded snapshot's parts (taken as
Protocols, so retrieval/ imports no index).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from retrieval.access import ChunkTable
from retrieval.retrievers.exact import ExactRetriever, TextScanner
from retrieval.types import AccessScope, CollectionStats, Filters, Hit


class Shard(Protocol):
    """The retrieval calls a front makes to one shard. Each enforces `access` (and
    `filters`) inside the shard before ranking, and returns hits best first (equal scores
    by chunk id)."""

    def bm25_stats(self, query: str, access: AccessScope, filters: Filters) -> CollectionStats:
        """This shard's share of BM25's collection statistics over the rows `access` may read
        that pass `filters`."""
        ...

    def bm25(self, query: str, access: AccessScope, k: int, filters: Filters, stats: CollectionStats) -> list[Hit]:
        """The k best readable rows scored with `stats` (summed over every shard)."""
        ...

    def dense(self, vector: np.ndarray, access: AccessScope, k: int, filters: Filters) -> list[Hit]:
        """The k best readable rows by cosine with the (already encoded) query `vector`."""
        ...

    def exact(self, query: str, access: AccessScope, k: int, filters: Filters) -> list[Hit]:
        """The k best readable rows matching the exact query (retrieval/retrievers/exact.py)."""
        ...


class ScopedLexicalIndex(Protocol):
    """A BM25 index that reports its collection statistics and scores with given ones
    (indexes/bm25_index.py's `Bm25Index`)."""

    def collection_stats(self, query: str, allowed: np.ndarray) -> CollectionStats: ...

    def top_k(self, query: str, allowed: np.ndarray, k: int, order: np.ndarray | None = None,
              stats: CollectionStats | None = None) -> tuple[np.ndarray, np.ndarray]: ...


class ShardVectors(Protocol):
    def top_k(self, vector: np.ndarray, allowed: np.ndarray, k: int,
              order: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]: ...


class LocalShard:
    """A shard in this process, over one snapshot's chunk table, BM25 index, dense index and
    catalog (for exact scans)."""

    def __init__(self, chunks: ChunkTable, bm25: ScopedLexicalIndex, dense: ShardVectors, scanner: TextScanner) -> None:
        self._chunks, self._bm25, self._dense = chunks, bm25, dense
        self._exact = ExactRetriever(scanner, chunks)

    def bm25_stats(self, query: str, access: AccessScope, filters: Filters) -> CollectionStats:
        return self._bm25.collection_stats(query, self._chunks.mask(access, filters))

    def bm25(self, query: str, access: AccessScope, k: int, filters: Filters, stats: CollectionStats) -> list[Hit]:
        allowed = self._chunks.mask(access, filters)
        if stats.n == 0 or not allowed.any():
            return []
        rows, scores = self._bm25.top_k(query, allowed, k, self._chunks.tiebreak, stats)
        return [self._chunks.hit(r, s, "bm25", (("bm25", float(s)),)) for r, s in zip(rows, scores, strict=True)]

    def dense(self, vector: np.ndarray, access: AccessScope, k: int, filters: Filters) -> list[Hit]:
        allowed = self._chunks.mask(access, filters)
        if not allowed.any():
            return []
        rows, scores = self._dense.top_k(vector, allowed, k, self._chunks.tiebreak)
        return [self._chunks.hit(r, s, "dense", (("dense", float(s)),)) for r, s in zip(rows, scores, strict=True)]

    def exact(self, query: str, access: AccessScope, k: int, filters: Filters) -> list[Hit]:
        return self._exact.search(query, access, k, filters)
