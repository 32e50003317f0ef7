from __future__ import annotations

import pytest

from retrieval.fusion import rrf
from retrieval.types import Hit


def hit(cid: str, retriever: str, score: float) -> Hit:
    return Hit(cid, cid.split("#")[0], "t", score, (retriever,), 0, 1, signals=((retriever, score),))


def test_rrf_adds_reciprocal_ranks_from_each_list():
    fused = rrf({"bm25": [hit("a#0", "bm25", 9), hit("b#0", "bm25", 5)],
                 "dense": [hit("b#0", "dense", 0.8), hit("c#0", "dense", 0.7)]}, k=60)
    scores = {h.chunk_id: h.score for h in fused}
    assert scores["b#0"] == pytest.approx(1 / 62 + 1 / 61)
    assert scores["a#0"] == pytest.approx(1 / 61)
    assert scores["c#0"] == pytest.approx(1 / 62)
    assert [h.chunk_id for h in fused] == ["b#0", "a#0", "c#0"]
    assert fused[0].retrievers == ("bm25", "dense") and fused[0].signal("dense") == 0.8


def test_rrf_weights_and_limit():
    fused = rrf({"bm25": [hit("a#0", "bm25", 1)], "dense": [hit("c#0", "dense", 1)]}, k=10,
                weights={"bm25": 0.5, "dense": 2.0}, limit=1)
    assert [h.chunk_id for h in fused] == ["c#0"] and fused[0].score == pytest.approx(2 / 11)


def test_rrf_breaks_ties_by_best_rank_then_id():
    fused = rrf({"x": [hit("b#0", "x", 1), hit("a#0", "x", 1)], "y": [hit("a#0", "y", 1), hit("b#0", "y", 1)]})
    assert [h.chunk_id for h in fused] == ["a#0", "b#0"]


def test_zscore_standardises_each_list_and_keeps_how_far_ahead_a_candidate_is():
    from retrieval.fusion import zscore_scores

    # bm25 puts "a" far ahead; dense has "b" narrowly ahead of "a". RRF levels them, z-score does not.
    scored = {"bm25": (["a", "b", "c"], [30.0, 5.0, 4.0]), "dense": (["b", "a", "c"], [0.81, 0.80, 0.20])}
    fused, best = zscore_scores(scored)
    assert max(fused, key=fused.get) == "a" and best == {"a": 1, "b": 1, "c": 3}
    z_bm25_a = (30.0 - 13.0) / ((((30 - 13) ** 2 + (5 - 13) ** 2 + (4 - 13) ** 2) / 3) ** 0.5)
    assert abs(fused["a"] - (z_bm25_a + (0.80 - 0.6033333) / 0.2852)) < 1e-2
    from retrieval.fusion import rrf_scores

    rrf, _ = rrf_scores({name: ids for name, (ids, _) in scored.items()})
    assert rrf["a"] == rrf["b"]  # the case z-score exists for


def test_zscore_gives_a_missing_candidate_the_lists_lowest_score_and_honours_weights():
    from retrieval.fusion import zscore_scores

    scored = {"bm25": (["a", "b"], [2.0, 1.0]), "dense": (["c", "b"], [0.9, 0.1])}
    fused, _ = zscore_scores(scored)
    assert fused["a"] == 1.0 + -1.0 and fused["c"] == -1.0 + 1.0 and fused["b"] == -2.0
    only_dense, _ = zscore_scores(scored, {"bm25": 0.0, "dense": 1.0})
    assert max(only_dense, key=only_dense.get) == "c"
    flat, _ = zscore_scores({"bm25": (["a", "b"], [1.0, 1.0])})  # no spread: no division by zero
    assert flat == {"a": 0.0, "b": 0.0}


def test_fusing_keys_of_any_kind_orders_them_as_fusing_the_hits_they_stand_for():
    from retrieval.fusion import fuse, fuse_hits

    chunk_ids = ["c#0", "a#0", "b#0", "d#0"]  # rows 0..3; row order is not chunk-id order
    lists = {"bm25": ([2, 0, 1], [3.0, 2.0, 2.0]), "dense": ([1, 3, 0], [0.9, 0.5, 0.5])}
    hits = {name: [hit(chunk_ids[r], name, s) for r, s in zip(rows, scores, strict=True)]
            for name, (rows, scores) in lists.items()}
    for method in ("rrf", "zscore"):
        by_rows = fuse(lists, lambda r: chunk_ids[r], method, weights={"bm25": 0.7, "dense": 0.3})
        fused = fuse_hits(hits, method, weights={"bm25": 0.7, "dense": 0.3})
        assert [(chunk_ids[r], s) for r, s in by_rows] == [(h.chunk_id, h.score) for h in fused]
        assert all(h.signal(method) == h.score for h in fused)


def test_equal_fused_scores_go_to_the_smaller_chunk_id_whatever_the_key():
    from retrieval.fusion import fuse

    chunk_ids = ["z#0", "a#0"]
    assert [r for r, _ in fuse({"x": ([0], [1.0]), "y": ([1], [1.0])}, lambda r: chunk_ids[r])] == [1, 0]


def test_rrf_is_fuse_hits_by_reciprocal_ranks():
    from retrieval.fusion import fuse_hits

    lists = {"bm25": [hit("a#0", "bm25", 9), hit("b#0", "bm25", 5)], "dense": [hit("b#0", "dense", 0.8)]}
    assert rrf(lists, k=10, limit=1) == fuse_hits(lists, "rrf", 10, limit=1)


def test_an_unknown_fusion_method_is_refused_by_the_fusion_itself():
    from retrieval.fusion import fuse

    with pytest.raises(ValueError, match="rrf, zscore"):
        fuse({"x": (["a"], [1.0])}, str, "borda")
