"""Give every chunk hit the same signals (BM25 and dense scores against the question), so
the grader judges evidence the same way whichever route found it."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Protocol, Sequence

import numpy as np

from retrieval.access import ChunkTable
from retrieval.types import Filters, Hit, Principal


class ScoredLexicalIndex(Protocol):
    def scores(self, query: str, allowed: np.ndarray | None = None) -> np.ndarray: ...


class StoredVectors(Protocol):
    def vectors(self, rows: np.ndarray) -> np.ndarray: ...


class HitScorer:
    def __init__(self, bm25: ScoredLexicalIndex, dense: StoredVectors, encode: Callable[[str], np.ndarray], chunks: ChunkTable) -> None:
        self._bm25 = bm25
        self._dense = dense
        self._encode = encode
        self._chunks = chunks

    def annotate(self, question: str, hits: Sequence[Hit], principal: Principal) -> list[Hit]:
        """Add missing `bm25` and `dense` signals (ACL-scoped BM25 statistics, as in retrieval)."""
        rows = [self._chunks.row_of(h.chunk_id) for h in hits]
        todo = [i for i, r in enumerate(rows) if r is not None and (hits[i].signal("bm25") is None or hits[i].signal("dense") is None)]
        if not todo:
            return list(hits)
        idx = np.asarray([rows[i] for i in todo], dtype=np.int64)
        allowed = self._chunks.mask(principal, Filters())
        bm25 = self._bm25.scores(question, allowed)[idx]
        dense = self._dense.vectors(idx) @ self._encode(question)[0]
        out = list(hits)
        for j, i in enumerate(todo):
            signals = dict(out[i].signals)
            signals.setdefault("bm25", float(bm25[j]))
            signals.setdefault("dense", float(dense[j]))
            out[i] = replace(out[i], signals=tuple(signals.items()))
        return out
