"""Hybrid retrieval: fusion of BM25 and dense (reciprocal-rank by default, or z-score;
see retrieval/fusion.py), each side already ACL-filtered.

The two sides are fused on chunk rows (by `fuse`, the one fusion of retrieval/fusion.py) and
only the k returned hits are built (a fused list of 2 x 100 candidates would otherwise build
200 hits to keep 8). The result equals `fuse_hits` over the two sides' hit lists: same order,
scores, retrievers and signals.
"""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from retrieval.access import ChunkTable
from retrieval.fusion import DEFAULT_RRF_K, FUSION_METHODS, fuse
from retrieval.types import AccessScope, Filters, Hit


class RowRanker(Protocol):
    """A retriever that can rank chunk rows without building hits (bm25, dense)."""

    name: str

    @property
    def chunks(self) -> ChunkTable: ...

    def rank(self, query: str, access: AccessScope, k: int, filters: Filters) -> tuple[np.ndarray, np.ndarray]:
        """(chunk rows, scores), best first, over the rows the scope may read."""
        ...


@dataclass(frozen=True)
class FusionParams:
    rrf_k: int = DEFAULT_RRF_K
    depth: int = 100  # candidates taken from each retriever before fusing
    weights: dict[str, float] = field(default_factory=lambda: {"bm25": 1.0, "dense": 1.0})
    method: str = "rrf"  # one of retrieval/fusion.py's FUSION_METHODS

    def __post_init__(self) -> None:
        if self.method not in FUSION_METHODS:
            raise ValueError(f"fusion method must be one of {', '.join(FUSION_METHODS)}, not {self.method!r}")


class HybridRetriever:
    name = "hybrid"

    def __init__(self, lexical: RowRanker, semantic: RowRanker, params: FusionParams = FusionParams(),
                 executor: Executor | None = None) -> None:
        self._parts = (lexical, semantic)
        self._chunks = lexical.chunks
        self.params = params
        self._executor = executor  # when given, the semantic side (query embedding) overlaps the lexical one

    def search(self, query: str, access: AccessScope, k: int, filters: Filters) -> list[Hit]:
        depth = max(k, self.params.depth)
        lexical, semantic = self._parts
        if self._executor is None:
            ranked = [(r.name, *r.rank(query, access, depth, filters)) for r in self._parts]
        else:
            later = self._executor.submit(semantic.rank, query, access, depth, filters)
            ranked = [(lexical.name, *lexical.rank(query, access, depth, filters)), (semantic.name, *later.result())]
        sides = {name: ([int(r) for r in part_rows], scores.tolist()) for name, part_rows, scores in ranked}
        chunk_ids = self._chunks.chunk_ids
        fused = fuse(sides, lambda r: chunk_ids[r], self.params.method, self.params.rrf_k, self.params.weights, k)
        found = {name: dict(zip(part_rows, scores, strict=True)) for name, (part_rows, scores) in sides.items()}
        hits = []
        for r, score in fused:
            names = tuple(name for name in sides if r in found[name])
            signals = tuple((name, float(found[name][r])) for name in names) + ((self.params.method, score),)
            hits.append(self._chunks.hit(r, score, names, signals))
        return hits
