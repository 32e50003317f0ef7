"""Semantic retrieval: cosine similarity of sentence embeddings over authorized chunks."""

from __future__ import annotations

from typing import Callable, Protocol

import numpy as np

from retrieval.access import ChunkTable
from retrieval.types import Filters, Hit, Principal


class VectorIndex(Protocol):
    def top_k(self, vector: np.ndarray, allowed: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]: ...


class DenseRetriever:
    name = "dense"

    def __init__(self, index: VectorIndex, encode: Callable[[str], np.ndarray], chunks: ChunkTable) -> None:
        self._index = index
        self._encode = encode
        self._chunks = chunks

    def search(self, query: str, principal: Principal, k: int, filters: Filters) -> list[Hit]:
        allowed = self._chunks.mask(principal, filters)
        if not allowed.any():
            return []
        rows, scores = self._index.top_k(self._encode(query), allowed, k)
        return [self._chunks.hit(r, s, self.name, (("dense", float(s)),)) for r, s in zip(rows, scores)]
