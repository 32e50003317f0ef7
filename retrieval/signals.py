"""Give every chunk hit the same signals (BM25 and dense scores against the question), so
the grader judges evidence the same way whichever route found it."""

from __future__ import annotations

from threading import Lock
from typing import Callable, Protocol, Sequence

import numpy as np

from retrieval.access import ChunkTable
from retrieval.lru import Lru
from retrieval.text import name_words
from retrieval.types import AccessScope, Filters, Hit


BACKGROUND_ROWS = 8192  # readable rows a scope's background is computed from, at most


class ScoredLexicalIndex(Protocol):
    def scores(self, query: str, allowed: np.ndarray | None = None) -> np.ndarray: ...

    def evidence(self, query: str, rows: np.ndarray, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...

    def term_stats(self, query: str, allowed: np.ndarray) -> tuple[int, int, int]: ...


class StoredVectors(Protocol):
    def vectors(self, rows: np.ndarray) -> np.ndarray: ...


class HitScorer:
    def __init__(self, bm25: ScoredLexicalIndex, dense: StoredVectors, encode: Callable[[str], np.ndarray],
                 chunks: ChunkTable) -> None:
        self._bm25 = bm25
        self._dense = dense
        self._encode = encode
        self._chunks = chunks
        # A covariance is dim x dim float32 (590 KB at 384-d): at most 64 scopes and 64 MiB.
        self._backgrounds: Lru[frozenset[str], tuple[np.ndarray, np.ndarray]] = Lru(
            64, 64 << 20, lambda _key, v: v[0].nbytes + v[1].nbytes)
        self._lock = Lock()
        self.background_builds = 0  # covariances computed (not served from the cache)

    def _background(self, access: AccessScope, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean vector and covariance matrix of the chunks the scope may read: the
        distribution a question's cosine scores are judged against (query performance
        prediction). Over the allowed rows alone, so forbidden chunks cannot move it: all of
        them up to BACKGROUND_ROWS, beyond that evenly spaced allowed rows (a choice made
        from the allowed rows only). The sums cost rows x dim^2: every row of a million-chunk
        scope took seconds on a scope's first question. The covariance is kept in float32,
        since every attempt reads it."""
        key = self._chunks.scope(access)  # principals with the same groups share one
        known = self._backgrounds.get(key)
        if known is not None:
            return known
        rows = np.flatnonzero(allowed)
        if len(rows) > BACKGROUND_ROWS:
            rows = rows[np.linspace(0, len(rows) - 1, BACKGROUND_ROWS).astype(np.int64)]
        dim = self._dense.vectors(rows[:1]).shape[1] if len(rows) else 1
        mean, second = np.zeros(dim), np.zeros((dim, dim))
        for start in range(0, len(rows), 4096):  # float32 products per block, float64 sums
            block = np.ascontiguousarray(self._dense.vectors(rows[start : start + 4096]), dtype=np.float32)
            mean += block.sum(axis=0, dtype=np.float64)
            second += block.T @ block
        n = max(1, len(rows))
        mean /= n
        out = (mean, (second / n - np.outer(mean, mean)).astype(np.float32))
        with self._lock:
            self.background_builds += 1
        self._backgrounds.put(key, out)
        return out

    def term_stats(self, question: str, access: AccessScope) -> tuple[int, int, int]:
        """(terms, known terms, rare terms) of the question over the chunks the scope may
        read: a routing signal that no forbidden chunk can move."""
        return self._bm25.term_stats(question, self._chunks.mask(access, Filters()))

    def absent_names(self, question: str, access: AccessScope, known: Sequence[str] = ()) -> list[str]:
        """Names the question writes (retrieval/text.py `name_words`) that no chunk the scope
        may read contains, skipping those inside `known` (entities already linked). A question
        about a name the readable documents never mention cannot be answered from them. Judged
        on the readable chunks' terms alone, so a name that only forbidden documents hold is
        absent, as it would be without them."""
        names = [n for n in name_words(question) if not any(n.lower() in k.lower() for k in known)]
        if not names:
            return []
        allowed = self._chunks.mask(access, Filters())
        out = []
        for name in names:
            terms, found, _ = self._bm25.term_stats(name, allowed)
            if terms and not found:
                out.append(name)
        return out

    def annotate(self, question: str, hits: Sequence[Hit], access: AccessScope, fresh: bool = False) -> list[Hit]:
        """Add the `bm25` and `dense` scores, `qcov` (the idf-weighted share of the question's
        terms the passage contains), `tcov` (the plain share), and the mean and standard
        deviation of the question's cosine over all readable chunks (`bg_mean`, `bg_sd`) to
        each chunk hit. Statistics are ACL-scoped as in retrieval; term presence comes from
        the BM25 postings. A retriever's own `bm25` / `dense` score is kept unless `fresh`
        (the hits are scored against a text other than the query that found them)."""
        rows = [self._chunks.row_of(h.chunk_id) for h in hits]
        todo = [i for i, r in enumerate(rows) if r is not None]
        if not todo:
            return list(hits)
        idx = np.asarray([rows[i] for i in todo], dtype=np.int64)
        allowed = self._chunks.mask(access, Filters())
        bm25, qcov, tcov = self._bm25.evidence(question, idx, allowed)
        query = self._encode(question)[0]
        dense = self._dense.vectors(idx) @ query
        mean, cov = self._background(access, allowed)
        bg_mean = float(query @ mean)
        bg_sd = float(np.sqrt(max(1e-12, float(query @ cov @ query))))
        out = list(hits)
        for j, i in enumerate(todo):
            h = out[i]
            signals = {} if fresh else dict(h.signals)
            signals.setdefault("bm25", float(bm25[j]))
            signals.setdefault("dense", float(dense[j]))
            signals["qcov"] = float(qcov[j])
            signals["tcov"] = float(tcov[j])
            signals["bg_mean"] = bg_mean
            signals["bg_sd"] = bg_sd
            # the constructor: dataclasses.replace costs about 2x more
            out[i] = Hit(h.chunk_id, h.doc_id, h.text, h.score, h.retrievers, h.start, h.end, h.title, h.source, h.date,
                         tuple(signals.items()), h.meta, h.page, h.section)
        return out
