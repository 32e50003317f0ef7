"""Lexical retrieval: BM25 over the chunks an access scope may read."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from retrieval.access import ChunkTable
from retrieval.types import AccessScope, Filters, Hit


class LexicalIndex(Protocol):
    def top_k(self, query: str, allowed: np.ndarray, k: int,
              order: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]: ...


class Bm25Retriever:
    name = "bm25"

    def __init__(self, index: LexicalIndex, chunks: ChunkTable) -> None:
        self._index = index
        self._chunks = chunks

    @property
    def chunks(self) -> ChunkTable:
        return self._chunks

    def rank(self, query: str, access: AccessScope, k: int, filters: Filters) -> tuple[np.ndarray, np.ndarray]:
        """(chunk rows, scores), best first, over the rows the scope may read."""
        return self._index.top_k(query, self._chunks.mask(access, filters), k, self._chunks.tiebreak)

    def search(self, query: str, access: AccessScope, k: int, filters: Filters) -> list[Hit]:
        rows, scores = self.rank(query, access, k, filters)
        return [self._chunks.hit(r, s, self.name, (("bm25", float(s)),)) for r, s in zip(rows, scores, strict=True)]
