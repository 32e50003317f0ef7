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
