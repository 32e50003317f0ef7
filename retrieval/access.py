"""Which chunks an access scope may see, as a boolean mask computed before any ranking.

Retrievers receive the caller's `AccessScope` (retrieval/types.py), never a mask: each
in-process backend over a snapshot turns it into its row mask here, so access control and
filters have exactly one implementation. A chunk outside the mask is never scored, so it
can neither appear in results nor push an authorized chunk out of the top k. A backend in
another process builds the same mask from the same scope over its own copy of the snapshot.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from datetime import date
from threading import Lock
from typing import Iterable, Mapping, Sequence

import numpy as np

from retrieval.lru import Lru
from retrieval.types import AccessScope, Filters, Hit, Region

_NO_DATE = np.iinfo(np.int32).min


def day_number(d: date) -> int:
    return d.toordinal()


@dataclass
class ChunkTable:
    """Column arrays for every chunk of a snapshot (row = position = BM25/FAISS id)."""

    chunk_ids: Sequence[str]
    doc_ids: Sequence[str]
    texts: Sequence[str]
    starts: np.ndarray
    ends: np.ndarray
    titles: Sequence[str | None]
    sources: Sequence[str | None]
    dates: Sequence[str | None]
    acls: Sequence[tuple[str, ...]]
    metas: Sequence[str | None] | None = None  # per row, the document's metadata values as text
    places: Mapping[int, Region] = field(default_factory=dict)  # row -> its page or section, for passages of files
    cache_size: int = 512
    cache_bytes: int = 256 << 20  # masks are a byte per chunk: 256 of them at a million chunks
    _postings: dict[str, np.ndarray] = field(init=False, repr=False)
    _date_days: np.ndarray = field(init=False, repr=False)
    _cache: Lru[tuple[frozenset[str], Filters], np.ndarray] = field(init=False, repr=False)
    _lock: Lock = field(init=False, repr=False)
    _doc_rows: dict[str, list[int]] | None = field(init=False, repr=False, default=None)
    _chunk_rows: dict[str, int] | None = field(init=False, repr=False, default=None)
    _tiebreak: np.ndarray | None = field(init=False, repr=False, default=None)
    _sample_keys: np.ndarray | None = field(init=False, repr=False, default=None)
    mask_builds: int = field(init=False, repr=False, default=0)  # masks computed (not served from the cache)

    def __post_init__(self) -> None:
        n = len(self.chunk_ids)
        rows_by_token: dict[str, list[int]] = {}
        for row, acl in enumerate(self.acls):
            for token in acl:
                rows_by_token.setdefault(token, []).append(row)
        self._postings = {t: np.asarray(r, dtype=np.int64) for t, r in rows_by_token.items()}
        self._date_days = np.array(
            [day_number(date.fromisoformat(d)) if d else _NO_DATE for d in self.dates], dtype=np.int32
        ).reshape(n)
        self._cache = Lru(self.cache_size, self.cache_bytes, lambda _key, mask: mask.nbytes)
        self._lock = Lock()

    def __len__(self) -> int:
        return len(self.chunk_ids)

    def scope(self, access: AccessScope) -> frozenset[str]:
        """The effective access scope: the scope's tokens that occur in some chunk's ACL.
        Principals with the same groups share one, and so one cache entry per filter,
        whatever their own ids (an id no ACL names adds nothing to what they may read)."""
        return frozenset(t for t in access.tokens if t in self._postings)

    def mask(self, access: AccessScope, filters: Filters) -> np.ndarray:
        """Rows the scope may read that pass the filters. Cached by effective scope; do not
        mutate the result."""
        key = (self.scope(access), filters)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        allowed = self._acl_mask(key[0])
        allowed &= self._filter_mask(filters)
        allowed.setflags(write=False)
        with self._lock:
            self.mask_builds += 1
        self._cache.put(key, allowed)
        return allowed

    def _acl_mask(self, scope: frozenset[str]) -> np.ndarray:
        allowed = np.zeros(len(self), dtype=bool)
        for token in scope:
            rows = self._postings.get(token)
            if rows is not None:
                allowed[rows] = True
        return allowed

    def _filter_mask(self, filters: Filters) -> np.ndarray:
        keep = np.ones(len(self), dtype=bool)
        if filters.sources is not None:
            wanted = set(filters.sources)
            keep &= np.fromiter((s in wanted for s in self.sources), dtype=bool, count=len(self))
        if filters.doc_ids is not None:
            wanted = set(filters.doc_ids)
            keep &= np.fromiter((d in wanted for d in self.doc_ids), dtype=bool, count=len(self))
        # A document without a date cannot be shown to be inside a date range: it is excluded.
        if filters.date_from is not None:
            keep &= (self._date_days != _NO_DATE) & (self._date_days >= day_number(filters.date_from))
        if filters.date_to is not None:
            keep &= (self._date_days != _NO_DATE) & (self._date_days <= day_number(filters.date_to))
        return keep

    def hit(self, row: int, score: float, retriever: str | tuple[str, ...],
            signals: Iterable[tuple[str, float]] = ()) -> Hit:
        """Build the typed hit for a row; provenance always names document and offsets."""
        place = self.places.get(row)
        return Hit(
            chunk_id=self.chunk_ids[row],
            doc_id=self.doc_ids[row],
            text=self.texts[row],
            score=float(score),
            retrievers=(retriever,) if isinstance(retriever, str) else retriever,
            start=int(self.starts[row]),
            end=int(self.ends[row]),
            title=self.titles[row],
            source=self.sources[row],
            date=self.dates[row],
            signals=tuple(signals),
            meta=self.metas[row] if self.metas is not None else None,
            page=place.page if place is not None else None,
            section=place.section if place is not None else (),
        )

    @property
    def tiebreak(self) -> np.ndarray:
        """Per row, the rank of its chunk id among all rows: equal scores are ordered by chunk
        id, so results do not depend on where a chunk is stored (the order files were read in,
        or a live index's segments) and a rebuild of the same corpus ranks the same way."""
        if self._tiebreak is None:
            order = np.argsort(np.asarray(self.chunk_ids, dtype=object), kind="stable")
            ranks = np.empty(len(order), dtype=np.int64)
            ranks[order] = np.arange(len(order), dtype=np.int64)
            self._tiebreak = ranks
        return self._tiebreak

    @property
    def sample_keys(self) -> np.ndarray:
        """Per row, a 32-bit hash of its chunk id (CRC-32: the same in every process and on
        every machine): samples chosen by it depend on the chunk ids, not on where rows are
        stored (retrieval/signals.py `background_rows`)."""
        if self._sample_keys is None:
            self._sample_keys = np.fromiter((zlib.crc32(c.encode("utf-8")) for c in self.chunk_ids), dtype=np.uint64,
                                            count=len(self.chunk_ids))
        return self._sample_keys

    def row_of(self, chunk_id: str) -> int | None:
        """Row of a chunk id (None for evidence that is not a chunk, such as a table row)."""
        if self._chunk_rows is None:
            self._chunk_rows = {c: i for i, c in enumerate(self.chunk_ids)}
        return self._chunk_rows.get(chunk_id)

    def rows_of_doc(self, doc_id: str) -> list[int]:
        """Rows of one document's chunks in order (used to expand and to show a document)."""
        if self._doc_rows is None:
            index: dict[str, list[int]] = {}
            for row, d in enumerate(self.doc_ids):
                index.setdefault(d, []).append(row)
            self._doc_rows = index
        return self._doc_rows.get(doc_id, [])


def top_k(scores: np.ndarray, allowed: np.ndarray, k: int, floor: float | None = None,
          order: np.ndarray | None = None) -> np.ndarray:
    """Rows of the k best scores among allowed rows (optionally only scores above `floor`).

    Sorted by score descending, ties broken by `order` (per row; `ChunkTable.tiebreak`) or
    else by row, so results are deterministic.
    """
    candidates = np.flatnonzero(allowed if floor is None else allowed & (scores > floor))
    if candidates.size == 0 or k <= 0:
        return candidates[:0]
    if candidates.size > k:
        # Keep every row tied with the k-th score, then order by (score desc, row) and cut.
        kth = np.partition(-scores[candidates], k - 1)[k - 1]
        candidates = candidates[-scores[candidates] <= kth]
    ties = candidates if order is None else order[candidates]
    ranked = np.lexsort((ties, -scores[candidates]))
    return candidates[ranked][:k]
