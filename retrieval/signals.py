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

    def evidence(self, query: str, rows: np.ndarray, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...


class StoredVectors(Protocol):
    def vectors(self, rows: np.ndarray) -> np.ndarray: ...


class HitScorer:
    def __init__(self, bm25: ScoredLexicalIndex, dense: StoredVectors, encode: Callable[[str], np.ndarray], chunks: ChunkTable) -> None:
        self._bm25 = bm25
        self._dense = dense
        self._encode = encode
        self._chunks = chunks

    def annotate(self, question: str, hits: Sequence[Hit], principal: Principal) -> list[Hit]:
        """Add the `bm25` and `dense` scores, `qcov` (the idf-weighted share of the question's
        terms the passage contains) and `tcov` (the plain share) to each chunk hit; statistics
        are ACL-scoped as in retrieval; term presence comes from the BM25 postings."""
        rows = [self._chunks.row_of(h.chunk_id) for h in hits]
        todo = [i for i, r in enumerate(rows) if r is not None]
        if not todo:
            return list(hits)
        idx = np.asarray([rows[i] for i in todo], dtype=np.int64)
        allowed = self._chunks.mask(principal, Filters())
        bm25, qcov, tcov = self._bm25.evidence(question, idx, allowed)
        dense = self._dense.vectors(idx) @ self._encode(question)[0]
        out = list(hits)
        for j, i in enumerate(todo):
            h = out[i]
            signals = dict(h.signals)
            signals.setdefault("bm25", float(bm25[j]))
            signals.setdefault("dense", float(dense[j]))
            signals["qcov"] = float(qcov[j])
            signals["tcov"] = float(tcov[j])
            out[i] = replace(h, signals=tuple(signals.items()))
        return out
