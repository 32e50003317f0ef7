"""Several index segments served as one: the immutable base snapshot plus a delta segment.

A live index (indexes/live.py) keeps its changes out of the base snapshot: the documents
written since the base was built form a small delta segment with its own catalog rows,
BM25 postings and FAISS ids, numbered after the base's rows (base rows 0..N-1, delta rows
N..N+M-1), and every base chunk whose document was replaced or deleted is a tombstone. The
classes here put those parts behind the interfaces the retrievers already use, so the
retrievers, the access mask and the loop need no second code path:

- tombstones get an empty ACL in the view's chunk table, so no principal's mask holds them:
  they are never scored by any retriever, like a forbidden chunk;
- BM25 (`SegmentedBm25`) adds the segments' collection statistics (N, total length, each
  query term's df) over the allowed rows and scores every segment with the sums, so a score
  is the one an index built from the live chunks alone would give;
- dense (`SegmentedDense`) searches each segment with its share of the mask and merges;
- the catalog (`LiveCatalog`) answers documents, exact scans and entity names from both.

Equal scores are ordered by chunk id (`ChunkTable.tiebreak`), never by row, so the view
ranks like a full rebuild of the same documents, which stores them in another order.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from indexes.bm25_index import Bm25Index, CollectionStats
from indexes.catalog import Catalog
from indexes.dense_index import DenseIndex
from retrieval.access import ChunkTable, top_k
from retrieval.types import Document


def _offsets(sizes: Sequence[int]) -> list[int]:
    return [int(x) for x in np.concatenate([[0], np.cumsum(sizes)])]


class SegmentedBm25:
    """BM25 over segments whose rows follow each other, with statistics summed over them.

    `live` marks the rows that exist (tombstones excluded); it stands in for "every row"
    where a caller passes no mask."""

    def __init__(self, parts: Sequence[Bm25Index], live: np.ndarray) -> None:
        self.parts = list(parts)
        self._at = _offsets([p.size for p in self.parts])
        self.size = self._at[-1]
        self.params = self.parts[0].params
        self.tokenize = self.parts[0].tokenize
        self._live = live

    def _slices(self, allowed: np.ndarray) -> list[np.ndarray]:
        return [allowed[self._at[i] : self._at[i + 1]] for i in range(len(self.parts))]

    def collection_stats(self, query: str, allowed: np.ndarray) -> CollectionStats:
        total = CollectionStats(0, 0.0, {})
        for part, mask in zip(self.parts, self._slices(allowed), strict=True):
            total = total + part.collection_stats(query, mask)
        return total

    def scores(self, query: str, allowed: np.ndarray | None = None) -> np.ndarray:
        allowed = self._live if allowed is None else allowed
        return self.scores_with(query, allowed, self.collection_stats(query, allowed))

    def scores_with(self, query: str, allowed: np.ndarray, stats: CollectionStats) -> np.ndarray:
        """As `Bm25Index.scores_with`: every row's score with `stats`, which may span more
        than these segments (a live shard of a cluster is scored with every shard's sums)."""
        return np.concatenate([part.scores_with(query, mask, stats)
                               for part, mask in zip(self.parts, self._slices(allowed), strict=True)])

    def postings(self, term: str) -> np.ndarray:
        """As `Bm25Index.postings`, in view rows (each segment's, offset), tombstones included
        (no mask admits them)."""
        return np.concatenate([part.postings(term) + at for part, at in zip(self.parts, self._at, strict=False)])

    def idf(self, df: int, n: int) -> float:
        return self.parts[0].idf(df, n)

    def top_k(self, query: str, allowed: np.ndarray, k: int, order: np.ndarray | None = None,
              stats: CollectionStats | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Each segment's own pruned top k under the summed statistics (`stats` when given:
        they may span other shards), merged: the best k overall are among them, ties again by
        `order`."""
        stats = stats if stats is not None else self.collection_stats(query, allowed)
        found = [part.top_k(query, mask, k, None if order is None else order[at : at + part.size], stats)
                 for part, mask, at in zip(self.parts, self._slices(allowed), self._at, strict=False)]
        rows = np.concatenate([r + at for (r, _), at in zip(found, self._at, strict=False)]).astype(np.int64)
        scores = np.concatenate([s for _, s in found]).astype(np.float32)
        keep = top_k(scores, np.ones(len(rows), dtype=bool), k, floor=0.0, order=rows if order is None else order[rows])
        return rows[keep], scores[keep]

    def term_stats(self, query: str, allowed: np.ndarray) -> tuple[int, int, int]:
        """As `Bm25Index.term_stats`, from the summed statistics."""
        terms = list(dict.fromkeys(self.tokenize(query)))
        stats = self.collection_stats(query, allowed)
        dfs = [stats.df.get(t, 0) for t in terms]
        known = sum(1 for df in dfs if df)
        rare = sum(1 for df in dfs if df and df <= max(2, stats.n // 100))
        return len(terms), known, rare

    def evidence(self, query: str, rows: np.ndarray, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """As `Bm25Index.evidence`: (score, idf-weighted and plain share of the query terms some
        readable chunk holds that the row holds), with the summed statistics."""
        n = len(rows)
        stats = self.collection_stats(query, allowed)
        terms = [t for t in dict.fromkeys(self.tokenize(query)) if stats.df.get(t, 0)]
        if not n or not terms:
            return np.zeros(n), np.zeros(n), np.zeros(n)
        scores = self.scores_with(query, allowed, stats)[rows].astype(np.float64)
        hit = np.vstack([np.isin(rows, self.postings(term)) for term in terms])
        idf = np.asarray([self.idf(stats.df[t], stats.n) for t in terms])
        return scores, (idf @ hit) / (float(idf.sum()) or 1.0), hit.sum(axis=0) / len(terms)


class SegmentedDense:
    """FAISS segments whose rows follow each other: each is searched with its share of the
    access mask (inside FAISS, as for one index), and the best k of all are kept."""

    def __init__(self, parts: Sequence[DenseIndex]) -> None:
        self.parts = list(parts)
        self._at = _offsets([p.size for p in self.parts])

    @property
    def size(self) -> int:
        return self._at[-1]

    @property
    def dim(self) -> int:
        return self.parts[0].dim

    @property
    def kind(self) -> str:
        return "+".join(p.kind for p in self.parts)

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        out = np.zeros((len(rows), self.dim), dtype=np.float32)
        rows = np.asarray(rows, dtype=np.int64)
        for i, part in enumerate(self.parts):
            inside = (rows >= self._at[i]) & (rows < self._at[i + 1])
            if inside.any():
                out[inside] = part.vectors(rows[inside] - self._at[i])
        return out

    def top_k(self, vector: np.ndarray, allowed: np.ndarray, k: int,
              order: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        found, cosines = [], []
        for i, part in enumerate(self.parts):
            mask = allowed[self._at[i] : self._at[i + 1]]
            if part.size and mask.any():
                rows, scores = part.top_k(vector, mask, k, None if order is None else order[self._at[i] : self._at[i + 1]])
                found.append(rows + self._at[i])
                cosines.append(scores)
        if not found:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        rows, scores = np.concatenate(found), np.concatenate(cosines)
        ties = rows if order is None else order[rows]
        best = np.lexsort((ties, -scores))[:k]
        return rows[best], scores[best]


class LiveCatalog:
    """The base catalog with a delta catalog beside it (an in-memory DuckDB of the delta's
    documents and chunks, rows numbered after the base's). Documents of the delta replace
    those of the base; `removed` lists base documents deleted or replaced. User tables and
    SQL come from the base: live writes change documents only."""

    def __init__(self, base: Catalog, delta: Catalog, delta_docs: dict[str, Document], removed: frozenset[str],
                 dead_rows: np.ndarray, base_rows: int) -> None:
        self.base, self.delta = base, delta
        self.path = base.path
        self._docs, self._removed = delta_docs, removed
        self._dead = dead_rows
        self._n = base_rows

    def close(self) -> None:
        """Close the delta only: the base belongs to the snapshot it was loaded with."""
        self.delta.close()

    def cursor(self) -> Any:
        return self.base.cursor()

    def new_cursor(self) -> Any:
        return self.base.new_cursor()

    def tables(self) -> Any:
        return self.base.tables()

    def acl_tokens(self) -> frozenset[str]:
        return self.base.acl_tokens()

    def counts(self) -> dict[str, int]:
        base, delta = self.base.counts(), self.delta.counts()
        return {"documents": base["documents"] - len(self._removed) + delta["documents"],
                "chunks": base["chunks"] - int(self._dead.sum()) + delta["chunks"], "tables": base["tables"]}

    def entity_names(self) -> tuple[list[tuple[int, str]], list[tuple[int, str]], list[tuple[int, str]]]:
        base = self.base.entity_names()
        delta = self.delta.entity_names()
        return tuple([(r, name) for r, name in b if not self._dead[r]] + d  # type: ignore[return-value]
                     for b, d in zip(base, delta, strict=True))

    def document_acl(self, doc_id: str) -> tuple[str, ...] | None:
        """The base is always asked first, so a changed or deleted document costs the same
        lookup as any other id (its answer cannot be told apart by timing)."""
        base = self.base.document_acl(doc_id)
        if doc_id in self._docs:
            return self._docs[doc_id].acl
        return None if doc_id in self._removed else base

    def origin(self, doc_id: str) -> str:
        return self.delta.origin(doc_id) if doc_id in self._docs else self.base.origin(doc_id)

    def readable_document(self, doc_id: str, can_read: Callable[[tuple[str, ...]], bool]) -> Document | None:
        acl = self.document_acl(doc_id)
        return self.document(doc_id) if acl is not None and can_read(acl) else None

    def document(self, doc_id: str) -> Document | None:
        base = self.base.document(doc_id)  # asked first either way (see document_acl)
        if doc_id in self._docs:
            return self._docs[doc_id]
        return None if doc_id in self._removed else base

    def match_rows(self, phrases: Sequence[str], patterns: Sequence[str], terms: Sequence[str],
                   allowed: np.ndarray, identifiers: Sequence[str] = ()) -> list[tuple[int, float]]:
        """The exact scan of each catalog over its own rows of the mask (the same statement)."""
        in_delta = allowed.copy()
        in_delta[: self._n] = False
        return (self.base.match_rows(phrases, patterns, terms, allowed[: self._n], identifiers)
                + self.delta.match_rows(phrases, patterns, terms, in_delta, identifiers))


def view_chunks(base: ChunkTable, delta: ChunkTable, dead: np.ndarray, cache_size: int) -> ChunkTable:
    """The chunk table of base rows then delta rows. A tombstone keeps its row (the BM25 and
    FAISS ids stay aligned) with no ACL, id or text: no mask admits it, no document lookup
    finds it, and no hit can be built from it by mistake."""

    def base_col(values: Sequence[Any], blank: Any) -> list[Any]:
        return [blank if dead[i] else v for i, v in enumerate(values)]

    metas = None
    if base.metas is not None or delta.metas is not None:
        metas = base_col(base.metas or [None] * len(base), None) + list(delta.metas or [None] * len(delta))
    return ChunkTable(
        chunk_ids=base_col(base.chunk_ids, "") + list(delta.chunk_ids),
        doc_ids=base_col(base.doc_ids, "") + list(delta.doc_ids),
        texts=base_col(base.texts, "") + list(delta.texts),
        starts=np.concatenate([base.starts, delta.starts]).astype(np.int64),
        ends=np.concatenate([base.ends, delta.ends]).astype(np.int64),
        titles=base_col(base.titles, None) + list(delta.titles),
        sources=base_col(base.sources, None) + list(delta.sources),
        dates=base_col(base.dates, None) + list(delta.dates),
        acls=base_col(base.acls, ()) + list(delta.acls),
        metas=metas,
        places={**{r: p for r, p in base.places.items() if not dead[r]}, **{len(base) + r: p for r, p in delta.places.items()}},
        cache_size=cache_size,
        cache_bytes=base.cache_bytes,
    )
