"""Hybrid retrieval: reciprocal-rank fusion of BM25 and dense, each already ACL-filtered."""

from __future__ import annotations

from dataclasses import dataclass, field

from retrieval.fusion import DEFAULT_RRF_K, rrf
from retrieval.retrievers import Retriever
from retrieval.types import Filters, Hit, Principal


@dataclass(frozen=True)
class FusionParams:
    rrf_k: int = DEFAULT_RRF_K
    depth: int = 100  # candidates taken from each retriever before fusing
    weights: dict[str, float] = field(default_factory=lambda: {"bm25": 1.0, "dense": 1.0})


class HybridRetriever:
    name = "hybrid"

    def __init__(self, lexical: Retriever, semantic: Retriever, params: FusionParams = FusionParams()) -> None:
        self._parts = (lexical, semantic)
        self.params = params

    def search(self, query: str, principal: Principal, k: int, filters: Filters) -> list[Hit]:
        depth = max(k, self.params.depth)
        rankings = {r.name: r.search(query, principal, depth, filters) for r in self._parts}
        return rrf(rankings, k=self.params.rrf_k, weights=self.params.weights, limit=k)
