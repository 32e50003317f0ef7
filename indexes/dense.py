"""Dense retrieval index: FAISS inner product over L2-normalised embeddings (= cosine).

Three kinds, by size. `IndexFlatIP` (exact float32) below SQ8_FROM rows; above it
`IndexScalarQuantizer` with 8-bit codes, which reads a quarter of the memory per query (a
flat scan of 100k x 384 floats measured 10-17 ms here, bound by memory bandwidth; 8-bit codes
about 5 ms) at a small cost in score precision; both scan every allowed row. Where the build
asks for it (`hnsw_from`, the `dense_graph_from` setting; off by default), an HNSW graph
over the same 8-bit codes (`IndexHNSWSQ`), approximate: a scan grows with the corpus, but
the graph's recall depends on the vectors (on benchmarks/scale.py's stand-in vectors it
stayed under 0.8 at 1M rows even with a wide search; see BENCHMARKS.md), so it is off until
measured on the real model's vectors at that size.

ACLs are applied inside the search (an `IDSelectorBitmap`), so unauthorized rows are never
scored, and every query gets min(k, allowed) results. On the graph, a filtered walk can
starve when few rows are allowed (the OpenSearch "efficient filtering" problem), so: a scope
of at most EXACT_BELOW rows is scanned exactly (its rows' codes are decoded and scored, which
costs what the scope holds, not the corpus); a larger one walks the graph with the filter and
a search breadth widened by how selective the filter is; a walk that still returns fewer
than k rows falls back to the exact scan.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import faiss
import numpy as np

SQ8_FROM = 50_000  # rows from which the 8-bit index is used
HNSW_M, EF_CONSTRUCTION, EF_SEARCH, EF_MAX = 32, 128, 128, 1024
EXACT_BELOW = 10_000  # allowed rows up to which a graph index scans the scope exactly


class DenseIndex:
    """Row i of the FAISS index is chunk row i of the snapshot."""

    def __init__(self, index: faiss.Index) -> None:
        self._index = index

    @property
    def size(self) -> int:
        return int(self._index.ntotal)

    @property
    def dim(self) -> int:
        return int(self._index.d)

    @classmethod
    def build(cls, vectors: np.ndarray, sq8_from: int | None = None, hnsw_from: int | None = None) -> DenseIndex:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        index: faiss.Index
        if hnsw_from is not None and len(vectors) >= hnsw_from:
            index = faiss.IndexHNSWSQ(vectors.shape[1], faiss.ScalarQuantizer.QT_8bit,  # type: ignore[arg-type]
                                      HNSW_M, faiss.METRIC_INNER_PRODUCT)  # (faiss's stubs miss this overload)
            index.hnsw.efConstruction = EF_CONSTRUCTION
            index.train(vectors)
        elif len(vectors) >= (SQ8_FROM if sq8_from is None else sq8_from):
            index = faiss.IndexScalarQuantizer(vectors.shape[1], faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)
            index.train(vectors)
        else:
            index = faiss.IndexFlatIP(vectors.shape[1])
        if len(vectors):
            index.add(vectors)
        return cls(index)

    @property
    def kind(self) -> str:
        if isinstance(self._index, faiss.IndexHNSW):
            return "hnsw-sq8"
        return "sq8" if isinstance(self._index, faiss.IndexScalarQuantizer) else "flat"

    def save(self, path: Path) -> None:
        faiss.write_index(self._index, str(path))

    @classmethod
    def load(cls, path: Path) -> DenseIndex:
        return cls(faiss.read_index(str(path)))

    def _exact(self, query: np.ndarray, allowed: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The best k allowed rows by an exact scan of the allowed rows' 8-bit codes in the
        graph's own storage (no second copy of the vectors). With per-dimension ranges, a code
        decodes as vmin + (c + 0.5) / 255 * vdiff, so a row's inner product with q is
        q . vmin + (c + 0.5) . (q * vdiff) / 255: one small matrix product over the scope."""
        codes, vmin, vdiff = self._codes()
        rows = np.flatnonzero(allowed).astype(np.int64)
        weights = (query[0] * vdiff / 255.0).astype(np.float32)
        scores = np.empty(len(rows), dtype=np.float32)
        for start in range(0, len(rows), 32_768):
            block = rows[start : start + 32_768]
            scores[start : start + len(block)] = codes[block].astype(np.float32) @ weights
        scores += float(query[0] @ vmin) + 0.5 * float(weights.sum())
        best = np.argpartition(-scores, k - 1)[:k] if len(rows) > k else np.arange(len(rows))
        best = best[np.argsort(-scores[best], kind="stable")]
        return rows[best], scores[best]

    def _codes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(codes as an N x d uint8 view, vmin, vdiff) of the graph's 8-bit storage."""
        cached = getattr(self, "_codes_view", None)
        if cached is None:
            storage = faiss.downcast_index(self._index.storage)  # type: ignore[attr-defined]
            n, d = int(storage.ntotal), int(storage.d)
            codes = faiss.rev_swig_ptr(storage.codes.data(), n * d).reshape(n, d)  # type: ignore[attr-defined]
            trained = faiss.vector_to_array(storage.sq.trained).astype(np.float32)  # type: ignore[attr-defined]
            cached = self._codes_view = (codes, trained[:d], trained[d:])
        return cached

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        """Stored vectors of some rows (to score known hits against a query)."""
        if len(rows) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self._index.reconstruct_batch(np.ascontiguousarray(rows, dtype=np.int64))

    def top_k(self, vector: np.ndarray, allowed: np.ndarray, k: int,
              order: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Best k allowed rows by cosine similarity (fewer only when fewer are allowed), equal
        scores ordered by `order` (per row) when given."""
        n_allowed = int(allowed.sum())
        k = min(k, n_allowed)
        if k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        query = np.ascontiguousarray(vector, dtype=np.float32).reshape(1, -1)
        graph = isinstance(self._index, faiss.IndexHNSW)
        if graph and n_allowed <= EXACT_BELOW:
            found, cosines = self._exact(query, allowed, k)
        else:
            bits = np.packbits(allowed, bitorder="little")
            selector = faiss.IDSelectorBitmap(self.size, faiss.swig_ptr(bits))
            params: Any = faiss.SearchParametersHNSW() if graph else faiss.SearchParameters()  # type: ignore[attr-defined]
            params.sel = selector  # SearchParameters(sel=selector), in the form faiss's stubs declare
            if graph:  # a selective filter skips most of what the walk visits: widen it to match
                params.efSearch = int(min(EF_MAX, max(EF_SEARCH, k, EF_SEARCH * self.size / n_allowed)))
            scores, rows = self._index.search(query, k, params=params)
            keep = rows[0] >= 0  # FAISS pads with -1 when fewer rows pass the selector
            found, cosines = rows[0][keep].astype(np.int64), scores[0][keep]
            if graph and len(found) < k:
                found, cosines = self._exact(query, allowed, k)
        if order is not None and len(found) > 1:
            ranked = np.lexsort((order[found], -cosines))
            found, cosines = found[ranked], cosines[ranked]
        return found, cosines
