"""Semantic retrieval: cosine similarity of sentence embeddings over authorized chunks."""

from __future__ import annotations

from typing import Callable, Protocol

import numpy as np

from retrieval.access import ChunkTable
from retrieval.types import AccessScope, Filters, Hit


class VectorIndex(Protocol):
    def top_k(self, vector: np.ndarray, allowed: np.ndarray, k: int,
              order: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]: ...


class DenseRetriever:
    name = "dense"

    def __init__(self, index: VectorIndex, encode: Callable[[str], np.ndarray], chunks: ChunkTable) -> None:
        self._index = index
        self._encode = encode
        self._chunks = chunks

    @property
    def chunks(self) -> ChunkTable:
        return self._chunks

    def rank(self, query: str, access: AccessScope, k: int, filters: Filters) -> tuple[np.ndarray, np.ndarray]:
        """(chunk rows, cosines), best first, over the rows the scope may read."""
        allowed = self._chunks.mask(access, filters)
        if not allowed.any():
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        return self._index.top_k(self._encode(query), allowed, k, self._chunks.tiebreak)

    def search(self, query: str, access: AccessScope, k: int, filters: Filters) -> list[Hit]:
        rows, scores = self.rank(query, access, k, filters)
        return [self._chunks.hit(r, s, self.name, (("dense", float(s)),)) for r, s in zip(rows, scores, strict=True)]
