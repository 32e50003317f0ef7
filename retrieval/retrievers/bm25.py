"""Lexical retrieval: BM25 over the chunks a principal may read."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from retrieval.access import ChunkTable
from retrieval.types import Filters, Hit, Principal


class LexicalIndex(Protocol):
    def top_k(self, query: str, allowed: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]: ...


class Bm25Retriever:
    name = "bm25"

    def __init__(self, index: LexicalIndex, chunks: ChunkTable) -> None:
        self._index = index
        self._chunks = chunks

    def search(self, query: str, principal: Principal, k: int, filters: Filters) -> list[Hit]:
        allowed = self._chunks.mask(principal, filters)
        rows, scores = self._index.top_k(query, allowed, k)
        return [self._chunks.hit(r, s, self.name, (("bm25", float(s)),)) for r, s in zip(rows, scores)]
