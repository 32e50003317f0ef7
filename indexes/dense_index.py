"""Dense retrieval index: FAISS inner product over L2-normalised embeddings (= cosine).

Every index holds a scan over all rows: `IndexFlatIP` (exact float32) below SQ8_FROM rows,
above it `IndexScalarQuantizer` with 8-bit codes, which reads a quarter of the memory per
query (a flat scan of 100k x 384 floats measured 10-17 ms here, bound by memory bandwidth;
8-bit codes about 5 ms) at a small cost in score precision. ACLs are applied inside the scan
(an `IDSelectorBitmap`), so unauthorized rows are never scored, and every query gets
min(k, allowed) results.

A scan grows with the corpus. From `hnsw_from` rows (the `dense_graph_from` setting) the
index also holds HNSW graphs (`IndexHNSWSQ`), one per access class: the rows whose documents
have the same readers. A principal who may read a class may read every row of its graph, so
a walk never passes through a row the principal may not read: adding, changing or removing
a forbidden document cannot change where a search goes or which rows it considers (one graph
over every row would route readable searches through forbidden rows). Scores come from the
8-bit scan, whose per-dimension ranges are trained on every row (README's documented
exception: scores move by up to about 8e-4). A class of at most EXACT_BELOW rows has no
graph; its rows are scanned exactly with the rest of the scope that no graph covers.

With two or more class graphs the index also holds one graph over all their rows together
(the whole graph): a caller who may read every row of every class graph (an administrator,
an auditor) walks it once instead of one walk per class, each a pass over cold memory (at a
million rows, 49 walks took 6.6-11.7 ms, the one walk at the whole breadth about 3 ms). It
is walked only by a caller who may read every row it holds, so the rule above stands. It
costs as much memory again as the class graphs, and about four times their build time (one
graph of a million rows builds slower than 49 small ones); `whole=False` leaves it out.

A search walks each readable class's graph (with the filter when only part of the class is
allowed, e.g. by a date constraint) and keeps the best k of all. It spends a breadth of
EF_BUDGET over its walks, at least EF_SEARCH each, widened by how selective a filter is; the
walks of one search share the `walkers` threads the runtime gives the index when it loads it
(WALKERS of them; without, as for an index being built, they run one after another). A
class with at most EXACT_BELOW allowed rows, and any walk that returns fewer than k rows, is
scanned exactly instead.
Every hit is scored from the scan's own codes, so the scores of graph and scan hits compare,
and rows tied with the k-th score all reach the caller's tiebreak. A live view (`without`)
scans the graphs that hold rows deleted or given other readers since the build, until a
compaction builds new ones.
"""

from __future__ import annotations

import weakref
import zipfile
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import faiss
import numpy as np

from retrieval.errors import SnapshotError
from retrieval.lru import Lru

SQ8_FROM = 50_000  # rows from which the 8-bit scan is used
HNSW_M, EF_CONSTRUCTION, EF_SEARCH, EF_BUDGET, EF_MAX = 32, 128, 64, 512, 1024
WALKERS = 2  # threads the runtime gives to walk the graphs of a search (FAISS releases the GIL while it walks)
EXACT_BELOW = 10_000  # allowed rows of a class up to which it is scanned exactly, and no graph is built below
PILE_SCAN_SHARE = 0.125  # rows outside the walked graphs, as a share of all rows, from which FAISS's scan reads them
PLAN_CACHE_MB = 16  # where each scope's mask meets the graphs, kept per cached (read-only) mask


Walk = tuple["ClassGraph", "np.ndarray | None", int]  # a graph, its allowed rows as packed bits (None: all), their count


@dataclass(frozen=True)
class _Plan:
    """How one mask meets the graphs: the walks to take and the rows to scan exactly (as
    packed bits too, when FAISS's scan reads them: see `_pile_bits`)."""

    owner: weakref.ref[np.ndarray]
    walks: list[Walk]
    pile: np.ndarray
    pile_bits: np.ndarray | None
    nbytes: int


@dataclass(frozen=True)
class ClassGraph:
    """The HNSW graph of one access class; graph id i is global row rows[i] (ascending)."""

    rows: np.ndarray
    index: Any  # faiss.IndexHNSWSQ


class DenseIndex:
    """Row i of the scan is chunk row i of the snapshot; graphs cover classes of rows."""

    def __init__(self, index: faiss.Index, graphs: Sequence[ClassGraph] = (), stale: np.ndarray | None = None,
                 whole: ClassGraph | None = None, walkers: Executor | None = None) -> None:
        """`stale` (per graph) marks graphs that hold rows no longer live (see `without`);
        `whole` is the graph over every class graph's rows; `walkers`, the caller's threads
        that walk several graphs of one search at once (module docstring)."""
        self._index = index
        self._walkers = walkers
        self._graphs = list(graphs)
        n = int(index.ntotal)
        self._outside = np.ones(n, dtype=bool)  # rows no graph covers
        for g in self._graphs:
            if len(g.rows) != int(g.index.ntotal) or (len(g.rows) and (g.rows[0] < 0 or g.rows[-1] >= n)) \
                    or (np.diff(g.rows) <= 0).any() or not self._outside[g.rows].all():
                raise SnapshotError("the dense index's graphs do not match its rows; rebuild the index")
            self._outside[g.rows] = False
        self._stale = np.zeros(len(self._graphs), dtype=bool) if stale is None else stale
        self._perm = np.concatenate([g.rows for g in self._graphs]) if self._graphs else np.zeros(0, dtype=np.int64)
        if whole is not None and (len(self._graphs) < 2 or len(whole.rows) != int(whole.index.ntotal)
                                  or not np.array_equal(whole.rows, np.sort(self._perm))):
            raise SnapshotError("the dense index's whole graph does not match its class graphs; rebuild the index")
        self._whole = whole
        self._starts = np.cumsum([0] + [len(g.rows) for g in self._graphs])[:-1]
        self._plans: Lru[tuple[int, int, int], _Plan] = Lru(256, PLAN_CACHE_MB << 20, lambda _, p: p.nbytes)

    @property
    def size(self) -> int:
        return int(self._index.ntotal)

    @property
    def dim(self) -> int:
        return int(self._index.d)

    @classmethod
    def build(cls, vectors: np.ndarray, sq8_from: int | None = None, hnsw_from: int | None = None,
              classes: np.ndarray | None = None, whole: bool = True, walkers: Executor | None = None) -> DenseIndex:
        """`classes` (one id per row: rows with the same readers share it) partitions the
        graphs; without it every row is one class (right only when everyone reads every row).
        `whole`: the whole graph too, when there are two or more class graphs; `walkers` as
        for the constructor."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        index: faiss.Index
        if len(vectors) >= (SQ8_FROM if sq8_from is None else sq8_from):
            index = faiss.IndexScalarQuantizer(vectors.shape[1], faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)
            index.train(vectors)
        else:
            index = faiss.IndexFlatIP(vectors.shape[1])
        if len(vectors):
            index.add(vectors)
        graphs: list[ClassGraph] = []
        if hnsw_from is not None and len(vectors) >= hnsw_from:
            ids = np.zeros(len(vectors), dtype=np.int64) if classes is None else np.asarray(classes, dtype=np.int64)
            if len(ids) != len(vectors):
                raise ValueError(f"{len(ids)} class ids for {len(vectors)} vectors")
            order = np.argsort(ids, kind="stable")
            bounds = np.flatnonzero(np.diff(ids[order])) + 1
            for rows in np.split(order, bounds):
                if len(rows) > EXACT_BELOW:  # a smaller class is always scanned
                    graphs.append(ClassGraph(rows, _graph(vectors[rows])))
        union = None
        if whole and len(graphs) >= 2:
            rows = np.sort(np.concatenate([g.rows for g in graphs]))
            union = ClassGraph(rows, _graph(vectors[rows]))
        return cls(index, graphs, whole=union, walkers=walkers)

    @property
    def kind(self) -> str:
        scan = "sq8" if isinstance(self._index, faiss.IndexScalarQuantizer) else "flat"
        return f"{scan}+hnsw" if self._graphs else scan

    @property
    def graphs(self) -> int:
        """How many access classes have a graph."""
        return len(self._graphs)

    def without(self, dead: np.ndarray) -> DenseIndex:
        """This index where rows `dead` (per row) are gone: deleted, replaced, or given other
        readers since the build, until a compaction rebuilds the graphs. A graph holding one
        is scanned, not walked, since a walk would pass through it (and a row whose readers
        changed may now be one the caller cannot read)."""
        stale = np.asarray([bool(dead[g.rows].any()) for g in self._graphs], dtype=bool)
        if not stale.any():
            return self
        # The whole graph holds the stale rows too: dropped.
        return DenseIndex(self._index, self._graphs, stale, walkers=self._walkers)

    def save(self, path: Path) -> None:
        """The scan at `path`; the graphs, if any, beside it (`graphs_path`)."""
        faiss.write_index(self._index, str(path))
        if self._graphs:  # an .npz (np.load reads it) written one graph at a time, never all serialised at once
            named = [(str(i), g) for i, g in enumerate(self._graphs)] + ([("whole", self._whole)] if self._whole else [])
            with zipfile.ZipFile(graphs_path(path), "w", zipfile.ZIP_STORED, allowZip64=True) as out:
                for key, g in named:
                    for name, array in ((f"rows{key}", g.rows), (f"graph{key}", faiss.serialize_index(g.index))):
                        with out.open(f"{name}.npy", "w", force_zip64=True) as f:
                            np.lib.format.write_array(f, np.asarray(array), allow_pickle=False)

    @classmethod
    def load(cls, path: Path, graphs: bool = True, walkers: Executor | None = None) -> DenseIndex:
        """The index saved at `path`; with `graphs` False the scan only (enough to read vectors);
        `walkers` as for the constructor."""
        parts, whole = [], None
        if graphs and graphs_path(path).is_file():
            with np.load(graphs_path(path)) as stored:
                def read(key: str) -> ClassGraph:
                    return ClassGraph(stored[f"rows{key}"].astype(np.int64), faiss.deserialize_index(stored[f"graph{key}"]))
                whole = read("whole") if "rowswhole" in stored.files else None
                parts = [read(str(i)) for i in range(len(stored.files) // 2 - (whole is not None))]
        return cls(faiss.read_index(str(path)), parts, whole=whole, walkers=walkers)

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        """Stored vectors of some rows (to score known hits against a query)."""
        if len(rows) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self._index.reconstruct_batch(np.ascontiguousarray(rows, dtype=np.int64))

    def top_k(self, vector: np.ndarray, allowed: np.ndarray, k: int,
              order: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Best k allowed rows by cosine similarity (fewer only when fewer are allowed), equal
        scores ordered by `order` (per row) when given."""
        n_allowed = int(np.count_nonzero(allowed))
        k = min(k, n_allowed)
        if k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        query = np.ascontiguousarray(vector, dtype=np.float32).reshape(1, -1)
        if self._graphs:
            found = self._walk(query, allowed, k)
            cosines = self._scores(query[0], found)
        else:
            bits = np.packbits(allowed, bitorder="little")
            found, cosines = self._scan(query, bits, k, n_allowed, ties=order is not None)
        ties = found if order is None else order[found]
        ranked = np.lexsort((ties, -cosines))[:k]
        return found[ranked], cosines[ranked].astype(np.float32)

    def _walk(self, query: np.ndarray, allowed: np.ndarray, k: int) -> np.ndarray:
        """Candidate rows (at least the best k allowed, approximately) from the readable
        classes' graphs and an exact scan of what they leave."""
        walks, pile, pile_bits = self._plan(allowed)
        ef = max(EF_SEARCH, EF_BUDGET // max(1, len(walks)))
        if len(walks) > 1 and self._walkers is not None:
            found = list(self._walkers.map(lambda w: _search(w[0], w[1], w[2], query, k, ef), walks))
        else:
            found = [_search(g, mask, count, query, k, ef) for g, mask, count in walks]
        for i, (g, mask, count) in enumerate(walks):
            if len(found[i][0]) < min(k, count):  # a starved walk: scan that class's allowed rows
                rows = g.rows if mask is None else g.rows[np.unpackbits(mask, count=len(g.rows), bitorder="little") > 0]
                found[i] = self._exact(query, rows, k)
        if pile_bits is not None:
            found.append(self._scan(query, pile_bits, k, len(pile), ties=True))
        elif len(pile):
            found.append(self._exact(query, pile, k))
        return np.concatenate([rows for rows, _ in found])  # disjoint: a row is in one graph or in the pile

    def _scan(self, query: np.ndarray, bits: np.ndarray, k: int, n_allowed: int,
              ties: bool) -> tuple[np.ndarray, np.ndarray]:
        """The best k of the `n_allowed` rows set in `bits` (packed, little-endian) by FAISS's
        scan of every row (a bitmap selector: a row not allowed is never scored); with `ties`,
        one past the k-th, widened while it ties, so that the caller's tiebreak, not FAISS,
        picks among rows tied with the k-th."""
        params: Any = faiss.SearchParameters()
        params.sel = faiss.IDSelectorBitmap(self.size, faiss.swig_ptr(bits))  # in the form faiss's stubs declare
        want = min(n_allowed, k + 1) if ties else k
        while True:
            scores, rows = self._index.search(query, want, params=params)
            keep = rows[0] >= 0  # FAISS pads with -1 when fewer rows pass the selector
            found, cosines = rows[0][keep].astype(np.int64), scores[0][keep]
            if want == k or len(found) < want or want >= n_allowed or cosines[-1] < cosines[k - 1]:
                return found, cosines
            want = min(n_allowed, 2 * want)

    def _plan(self, allowed: np.ndarray) -> tuple[list[Walk], np.ndarray, np.ndarray | None]:
        """The walks and the exact scan for a mask: reading a million-row mask at each graph's
        rows costs milliseconds, so it is kept while the mask lives (the access layer caches
        one read-only mask per scope and filters; a view of one, as a segment's share, counts)."""
        owner = allowed
        while isinstance(owner.base, np.ndarray):
            owner = owner.base
        key = (allowed.__array_interface__["data"][0], len(allowed), allowed.strides[0])
        cacheable = not owner.flags.writeable and owner.base is None
        if cacheable:
            hit = self._plans.get(key)
            if hit is not None and hit.owner() is owner:
                return hit.walks, hit.pile, hit.pile_bits
        local = allowed[self._perm]
        scanned = [np.flatnonzero(allowed & self._outside)]
        walks: list[Walk] = []
        if self._whole is not None and local.all():  # a caller who reads every class graph whole: one walk
            walks.append((self._whole, None, len(local)))
        elif len(local):
            counts = np.add.reduceat(local, self._starts, dtype=np.int64)
            for g, start, count, stale in zip(self._graphs, self._starts, counts, self._stale, strict=True):
                if count == 0:
                    continue
                mask = local[start : start + len(g.rows)]
                if count <= EXACT_BELOW or stale:
                    scanned.append(g.rows[mask])
                else:
                    walks.append((g, None if count == len(g.rows) else np.packbits(mask, bitorder="little"), int(count)))
        pile = np.concatenate(scanned)
        pile_bits = self._pile_bits(pile)
        if cacheable:
            nbytes = sum(0 if bits is None else bits.nbytes for bits in [pile, pile_bits, *(w[1] for w in walks)])
            self._plans.put(key, _Plan(weakref.ref(owner), walks, pile, pile_bits, nbytes))
        return walks, pile, pile_bits

    def _pile_bits(self, pile: np.ndarray) -> np.ndarray | None:
        """The pile as packed bits when FAISS's own scan should read it (past PILE_SCAN_SHARE
        of the index, gathering that many codes in numpy is slower), else None."""
        if len(pile) <= PILE_SCAN_SHARE * self.size:
            return None
        outside = np.zeros(self.size, dtype=bool)
        outside[pile] = True
        return np.packbits(outside, bitorder="little")

    def _exact(self, query: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The best k of `rows` by an exact scan of their stored codes (or floats): costs what
        the rows hold, not the corpus. With per-dimension ranges, an 8-bit code decodes as
        vmin + (c + 0.5) / 255 * vdiff, so a row's inner product with q is
        q . vmin + (c + 0.5) . (q * vdiff) / 255: one small matrix product over the rows."""
        scores = self._scores(query[0], rows)
        if len(rows) > k:  # every row tied with the k-th stays, for the caller's tiebreak to choose
            kth = np.partition(scores, len(rows) - k)[len(rows) - k]
            best = np.flatnonzero(scores >= kth)
        else:
            best = np.arange(len(rows))
        return rows[best], scores[best]

    def _scores(self, q: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Inner products of `q` with the stored rows `rows`, read from the scan's codes."""
        stored, offset, weights = self._scan_view(q)
        scores = np.empty(len(rows), dtype=np.float32)
        for start in range(0, len(rows), 32_768):
            block = rows[start : start + 32_768]
            scores[start : start + len(block)] = stored[block].astype(np.float32) @ weights
        return scores + np.float32(offset)

    def _scan_view(self, q: np.ndarray) -> tuple[np.ndarray, float, np.ndarray]:
        """(stored rows as an N x d array, score offset, per-dimension weights) for `q`."""
        n, d = self.size, self.dim
        if isinstance(self._index, faiss.IndexScalarQuantizer):
            codes = faiss.rev_swig_ptr(self._index.codes.data(), n * d).reshape(n, d)
            trained = faiss.vector_to_array(self._index.sq.trained).astype(np.float32)
            vmin, vdiff = trained[:d], trained[d:]
            weights = (q * vdiff / 255.0).astype(np.float32)
            return codes, float(q @ vmin) + 0.5 * float(weights.sum()), weights
        floats = faiss.rev_swig_ptr(self._index.get_xb(), n * d).reshape(n, d)  # type: ignore[attr-defined]
        return floats, 0.0, q


def graphs_path(path: Path) -> Path:
    """Where the graphs of the dense index at `path` are stored."""
    return path.with_name(path.stem + "-graphs.npz")


def _graph(vectors: np.ndarray) -> Any:
    index = faiss.IndexHNSWSQ(vectors.shape[1], faiss.ScalarQuantizer.QT_8bit,  # type: ignore[arg-type]
                              HNSW_M, faiss.METRIC_INNER_PRODUCT)  # (faiss's stubs miss this overload)
    index.hnsw.efConstruction = EF_CONSTRUCTION
    index.train(vectors)
    index.add(vectors)
    return index


def _search(g: ClassGraph, bits: np.ndarray | None, count: int, query: np.ndarray, k: int,
            ef: int) -> tuple[np.ndarray, np.ndarray]:
    """The walk of one class's graph: global rows and graph scores of up to k hits. A
    selective filter skips most of what the walk visits, so the breadth widens to match."""
    params: Any = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]
    params.efSearch = int(min(EF_MAX, max(ef, k, ef * len(g.rows) / count)))
    if bits is not None:
        params.sel = faiss.IDSelectorBitmap(len(g.rows), faiss.swig_ptr(bits))
    want = min(count, k + 1)
    while True:  # one past the k-th, widened while it ties, so the caller's tiebreak picks among them
        scores, ids = g.index.search(query, want, params=params)
        keep = ids[0] >= 0
        found, cosines = g.rows[ids[0][keep]], scores[0][keep]
        if len(found) < want or want >= count or len(found) <= k or cosines[-1] < cosines[k - 1]:
            return found, cosines
        want = min(count, 2 * want)
