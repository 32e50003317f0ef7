"""Give every chunk hit the same signals (BM25 and dense scores against the question), so
the grader judges evidence the same way whichever route found it."""

from __future__ import annotations

from dataclasses import dataclass
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


SAMPLE_SPACE = 1 << 32  # `ChunkTable.sample_keys` are 32-bit


def background_rows(rows: np.ndarray, keys: np.ndarray, readable: int) -> np.ndarray:
    """The rows of `rows` a background is computed from, when `readable` rows are readable in
    all (here, or over every shard of a cluster): all of them up to BACKGROUND_ROWS, beyond
    that those whose sample key (a hash of the chunk id) falls under BACKGROUND_ROWS /
    readable of the key space, about BACKGROUND_ROWS rows. The sums cost rows x dim^2 (every
    row of a million-chunk scope took seconds on a scope's first question). The choice
    depends on the chunk ids and the readable count alone, never on where rows are stored,
    so shards that each choose among their own rows choose what one node chooses."""
    if readable <= BACKGROUND_ROWS:
        return rows
    chosen: np.ndarray = rows[keys[rows] < SAMPLE_SPACE * BACKGROUND_ROWS // readable]
    return chosen


@dataclass(frozen=True)
class Moments:
    """Count, sum and sum of outer products of some vectors (float64): what a background is
    computed from, added up over shards."""

    count: int
    total: np.ndarray
    second: np.ndarray

    def __add__(self, other: Moments) -> Moments:
        return Moments(self.count + other.count, self.total + other.total, self.second + other.second)

    def background(self) -> tuple[np.ndarray, np.ndarray]:
        """(mean, covariance in float32) of the vectors."""
        n = max(1, self.count)
        mean = self.total / n
        return mean, (self.second / n - np.outer(mean, mean)).astype(np.float32)


def moments(vectors: StoredVectors, rows: np.ndarray, dim: int | None = None) -> Moments:
    """The moments of the stored vectors of `rows` (float32 products per block, float64 sums)."""
    dim = dim or (vectors.vectors(rows[:1]).shape[1] if len(rows) else 1)
    total, second = np.zeros(dim), np.zeros((dim, dim))
    for start in range(0, len(rows), 4096):
        block = np.ascontiguousarray(vectors.vectors(rows[start : start + 4096]), dtype=np.float32)
        total += block.sum(axis=0, dtype=np.float64)
        second += block.T @ block
    return Moments(len(rows), total, second)


def best_cosines(chunks: ChunkTable, vectors: StoredVectors, allowed: np.ndarray, doc_ids: Sequence[str],
                 query: np.ndarray) -> dict[str, float]:
    """For each of `doc_ids` with an allowed chunk: the best cosine of its allowed chunks with `query`."""
    out = {}
    for d in dict.fromkeys(doc_ids):
        rows = np.asarray([r for r in chunks.rows_of_doc(d) if allowed[r]], dtype=np.int64)
        if len(rows):
            out[d] = float((vectors.vectors(rows) @ query).max())
    return out


def absent_of(names: Sequence[str], known: Sequence[str], term_stats: Callable[[str], tuple[int, int, int]]) -> list[str]:
    """The names (`name_words` of a question) outside `known` none of whose terms a readable
    chunk holds, by `term_stats` over the readable chunks."""
    out = []
    for name in names:
        if any(name.lower() in k.lower() for k in known):
            continue
        terms, found, _ = term_stats(name)
        if terms and not found:
            out.append(name)
    return out


class Signals(Protocol):
    """The loop's evidence signals and routing statistics over what a scope may read (one
    snapshot's `HitScorer`, or a cluster's, retrieval/scatter_links.py)."""

    def term_stats(self, question: str, access: AccessScope) -> tuple[int, int, int]: ...

    def absent_names(self, question: str, access: AccessScope, known: Sequence[str] = ()) -> list[str]: ...

    def annotate(self, question: str, hits: Sequence[Hit], access: AccessScope, fresh: bool = False) -> list[Hit]: ...


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
        prediction). Over the allowed rows alone, so forbidden chunks cannot move it (see
        `background_rows`). Kept per effective scope, since every attempt reads it."""
        key = self._chunks.scope(access)  # principals with the same groups share one
        known = self._backgrounds.get(key)
        if known is not None:
            return known
        rows = np.flatnonzero(allowed)
        out = moments(self._dense, background_rows(rows, self._chunks.sample_keys, len(rows))).background()
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
        allowed = self._chunks.mask(access, Filters())
        return absent_of(name_words(question), known, lambda name: self._bm25.term_stats(name, allowed))

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
        return with_signals(hits, todo, (bm25, qcov, tcov, self._dense.vectors(idx) @ query), query,
                            self._background(access, allowed), fresh)


def with_signals(hits: Sequence[Hit], todo: Sequence[int], columns: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
                 query: np.ndarray, background: tuple[np.ndarray, np.ndarray], fresh: bool) -> list[Hit]:
    """`hits` with the signals of `HitScorer.annotate` on the hits at positions `todo`:
    `columns` are their (bm25, qcov, tcov, dense) values in that order, `background` the
    scope's (mean, covariance) the question's vector `query` is judged against."""
    bm25, qcov, tcov, dense = columns
    mean, cov = background
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
