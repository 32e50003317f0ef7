"""The dense index: scans at every size, HNSW graphs per access class from `hnsw_from` rows."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import faiss
import numpy as np
import pytest

import indexes.dense_index as dense_module
from indexes.dense_index import DenseIndex, graphs_path


def _clustered(n: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((40, dim)).astype(np.float32)
    vectors = centers[rng.integers(0, 40, n)] + 0.4 * rng.standard_normal((n, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@contextmanager
def _one_thread() -> Iterator[None]:
    """FAISS inserts into a graph from several threads, in an order that varies run to run;
    one thread makes two builds of the same vectors the same graph."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


def _narrow_walks(monkeypatch: pytest.MonkeyPatch, exact_below: int, ef: int) -> None:
    """Graphs for small classes, and narrow walks: where the path a walk takes shows in what it finds."""
    monkeypatch.setattr(dense_module, "EXACT_BELOW", exact_below)
    for name in ("EF_SEARCH", "EF_BUDGET"):
        monkeypatch.setattr(dense_module, name, ef)


def test_large_dense_index_uses_8bit_codes_and_still_returns_k_allowed_rows():
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((3000, 32)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    flat, sq8 = DenseIndex.build(vectors), DenseIndex.build(vectors, sq8_from=1000)
    assert (flat.kind, sq8.kind) == ("flat", "sq8")
    allowed = rng.random(3000) < 0.01
    for q in vectors[:20]:
        rows, _ = sq8.top_k(q, allowed, 10)
        assert len(rows) == min(10, int(allowed.sum())) and allowed[rows].all()
        exact, _ = flat.top_k(q, allowed, 10)
        assert len(set(rows) & set(exact)) >= 8


@pytest.mark.parametrize("pile_share", [dense_module.PILE_SCAN_SHARE, 0.0])
@pytest.mark.parametrize("sq8_from", [None, 1000])
def test_graphs_return_min_k_allowed_rows_for_any_scope_and_match_the_exact_scan(tmp_path, monkeypatch, sq8_from,
                                                                                  pile_share, threads):
    """`pile_share` 0: rows outside the walked graphs are read by FAISS's scan, not gathered.
    The loaded index walks its graphs on threads, as a served one does; the built one walks
    them one after another: both find the same rows."""
    monkeypatch.setattr(dense_module, "EXACT_BELOW", 400)
    monkeypatch.setattr(dense_module, "PILE_SCAN_SHARE", pile_share)
    rng = np.random.default_rng(3)
    vectors = _clustered(6000, 48, 3)
    classes = rng.choice(4, 6000, p=[0.5, 0.3, 0.15, 0.05])  # the last class (about 300 rows) gets no graph
    graph = DenseIndex.build(vectors, sq8_from=sq8_from, hnsw_from=1000, classes=classes)
    assert graph.graphs == 3 and graph.kind.endswith("+hnsw")
    graph.save(tmp_path / "g.faiss")
    assert graphs_path(tmp_path / "g.faiss").is_file()
    loaded = DenseIndex.load(tmp_path / "g.faiss", walkers=threads)
    flat = DenseIndex.build(vectors)
    scopes = {
        "every class": np.ones(6000, bool),
        "one class": classes == 0,
        "two classes and the graphless one": np.isin(classes, [1, 2, 3]),
        "every class with a graph (the whole graph)": classes < 3,
        "half of a class (a filter)": (classes == 0) & (rng.random(6000) < 0.5),
        "a few rows of a class, scanned": (classes == 1) & (rng.random(6000) < 0.05),
        "2 rows": np.isin(np.arange(6000), [17, 4000]),
        "the graphless class": classes == 3,
    }
    for name, allowed in scopes.items():
        overlap = []
        for q in vectors[rng.integers(0, 6000, 25)]:
            rows, scores = loaded.top_k(q, allowed, 10)
            again, again_scores = graph.top_k(q, allowed, 10)
            assert np.array_equal(rows, again) and np.array_equal(scores, again_scores), name
            assert len(rows) == min(10, int(allowed.sum())) and allowed[rows].all(), name
            assert (np.diff(scores) <= 1e-6).all(), name
            np.testing.assert_allclose(scores, loaded.vectors(rows) @ q, atol=1e-5)
            exact, _ = flat.top_k(q, allowed, 10)
            overlap.append(len(set(rows) & set(exact)) / len(exact))
        assert np.mean(overlap) >= 0.95, (name, np.mean(overlap))


def test_what_a_principal_finds_does_not_depend_on_the_vectors_of_classes_it_cannot_read(monkeypatch):
    _narrow_walks(monkeypatch, exact_below=200, ef=16)
    rng = np.random.default_rng(5)
    readable = _clustered(2000, 32, 5)
    queries = readable[rng.integers(0, 2000, 40)] + 0.3 * rng.standard_normal((40, 32)).astype(np.float32)
    # Two versions of the forbidden class: unrelated vectors, then vectors right beside the
    # questions (a forbidden document written to sit on every route a walk could take).
    far = _clustered(2000, 32, 6)
    near = np.repeat(queries, 50, axis=0) + 0.05 * rng.standard_normal((2000, 32)).astype(np.float32)
    near /= np.linalg.norm(near, axis=1, keepdims=True)
    classes = np.repeat([0, 1], 2000)
    allowed = classes == 0
    with _one_thread():
        builds = {(name, partitioned): DenseIndex.build(np.vstack([readable, other]), hnsw_from=0,
                                                         classes=classes if partitioned else None)
                  for name, other in (("far", far), ("near", near)) for partitioned in (True, False)}
    differs = 0
    for q in queries:
        rows, scores = builds["far", True].top_k(q, allowed, 10)
        rows2, scores2 = builds["near", True].top_k(q, allowed, 10)
        assert np.array_equal(rows, rows2) and np.array_equal(scores, scores2)
        one_graph = [builds[name, False].top_k(q, allowed, 10)[0] for name in ("far", "near")]
        differs += not np.array_equal(*one_graph)
    # The test can tell: one graph over every row routes readable searches through forbidden rows.
    assert differs > 0


@pytest.mark.parametrize("graphs", ["none", "walked", "scanned by FAISS beside a graph"])
def test_rows_tied_at_the_kth_score_are_chosen_by_the_tiebreak(monkeypatch, graphs):
    monkeypatch.setattr(dense_module, "EXACT_BELOW", 100)
    classes = np.arange(600) // 300
    if graphs == "scanned by FAISS beside a graph":  # the tied rows sit in a class too small for a graph
        monkeypatch.setattr(dense_module, "EXACT_BELOW", 300)
        monkeypatch.setattr(dense_module, "PILE_SCAN_SHARE", 0.0)
        classes = (np.arange(600) >= 200).astype(np.int64)
    vectors = _clustered(600, 16, 8)
    vectors[100:130] = vectors[0]  # 31 equal vectors: a query on them ties at every place of its top 10
    index = DenseIndex.build(vectors, hnsw_from=None if graphs == "none" else 0, classes=classes)
    assert index.graphs == (0 if graphs == "none" else 1 if graphs.startswith("scanned") else 2)
    order = np.arange(600)[::-1].copy()  # the tiebreak prefers high rows
    allowed = np.ones(600, bool)
    for scope in (allowed, np.arange(600) < 300):
        rows, _ = index.top_k(vectors[0], scope, 10, order)
        assert sorted(rows.tolist()) == list(range(120, 130))


def test_a_live_view_scans_the_graphs_that_hold_rows_no_longer_live(monkeypatch):
    _narrow_walks(monkeypatch, exact_below=100, ef=8)
    rng = np.random.default_rng(9)
    vectors = _clustered(3000, 32, 9)
    classes = np.arange(3000) % 3
    queries = vectors[rng.integers(0, 3000, 40)] + 0.3 * rng.standard_normal((40, 32)).astype(np.float32)
    dead = np.zeros(3000, bool)
    dead[rng.choice(np.flatnonzero(classes == 0), 400, replace=False)] = True  # deleted, or given other readers
    moved = vectors.copy()  # the gone rows moved beside the questions; nothing else differs
    moved[dead] = np.repeat(queries, 10, axis=0) + 0.05 * rng.standard_normal((400, 32)).astype(np.float32)
    moved /= np.linalg.norm(moved, axis=1, keepdims=True)
    with _one_thread():
        base, other = (DenseIndex.build(v, hnsw_from=0, classes=classes) for v in (vectors, moved))
    assert base.graphs == 3 and base.without(np.zeros(3000, bool)) is base
    allowed = (classes <= 1) & ~dead
    for views, alike in (((base, other), False), ((base.without(dead), other.without(dead)), True)):
        same = [np.array_equal(views[0].top_k(q, allowed, 10)[0], views[1].top_k(q, allowed, 10)[0]) for q in queries]
        assert all(same) if alike else not all(same)  # walked, the gone rows show; scanned, they cannot


def test_graphs_that_do_not_match_the_scan_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(dense_module, "EXACT_BELOW", 100)
    from retrieval.errors import SnapshotError

    vectors = _clustered(500, 16, 10)
    good = DenseIndex.build(vectors, hnsw_from=0, classes=np.zeros(500, int))
    assert good.graphs == 1
    good.save(tmp_path / "d.faiss")
    DenseIndex.build(vectors[:400]).save(tmp_path / "d.faiss")  # the scan of another index beside these graphs
    with pytest.raises(SnapshotError):
        DenseIndex.load(tmp_path / "d.faiss")
    assert DenseIndex.load(tmp_path / "d.faiss", graphs=False).size == 400


def test_only_a_caller_who_reads_every_class_graph_whole_walks_the_whole_graph(tmp_path, monkeypatch):
    _narrow_walks(monkeypatch, exact_below=100, ef=16)
    vectors = _clustered(2000, 32, 11)
    classes = np.arange(2000) % 4  # four classes of 500 rows, each with a graph
    index = DenseIndex.build(vectors, hnsw_from=0, classes=classes)
    index.save(tmp_path / "w.faiss")
    loaded = DenseIndex.load(tmp_path / "w.faiss")
    one_class = DenseIndex.build(vectors, hnsw_from=0, classes=np.zeros(2000, int))  # one graph is already whole
    assert (index.graphs, one_class.graphs) == (4, 1)
    every = np.ones(2000, bool)
    but_one = every.copy()
    but_one[7] = False  # one row of one class not readable (or filtered out)
    for ix in (index, loaded):
        walks, pile, _ = ix._plan(every)
        assert [len(w[0].rows) for w in walks] == [2000] and len(pile) == 0
        walks, _, _ = ix._plan(but_one)
        assert sorted(len(w[0].rows) for w in walks) == [500] * 4
    for q in vectors[:10]:
        assert np.array_equal(index.top_k(q, every, 10)[0], loaded.top_k(q, every, 10)[0])
    dead = np.zeros(2000, bool)
    dead[3] = True
    walks, _, _ = index.without(dead)._plan(every)  # a stale class graph: the whole graph holds its rows too
    assert 2000 not in [len(w[0].rows) for w in walks]
    without_whole = DenseIndex.build(vectors, hnsw_from=0, classes=classes, whole=False)  # dense_whole_graph off
    walks, _, _ = without_whole._plan(every)
    assert sorted(len(w[0].rows) for w in walks) == [500] * 4
