from __future__ import annotations

import math

import numpy as np
import pytest

from retrieval.metrics import all_found, ndcg_at_k, percentile, recall_at_k, reciprocal_rank


def test_ndcg_by_hand():
    # relevant a (grade 1) at rank 2 and c (grade 2) at rank 3; ideal puts c then a.
    dcg = 1 / math.log2(3) + 2 / math.log2(4)
    idcg = 2 / math.log2(2) + 1 / math.log2(3)
    assert ndcg_at_k(["x", "a", "c"], {"a": 1, "c": 2}, k=10) == pytest.approx(dcg / idcg)
    assert ndcg_at_k(["a", "c"], {"a": 1, "c": 1}) == 1.0
    assert ndcg_at_k(["x"] * 10 + ["a"], {"a": 1}, k=10) == 0.0
    assert ndcg_at_k(["a"], {}) == 0.0


def test_recall_mrr_and_full_support_by_hand():
    assert recall_at_k(["a", "b", "c"], ["c", "d"], k=2) == 0.0
    assert recall_at_k(["a", "b", "c"], ["c", "d"], k=3) == 0.5
    assert reciprocal_rank(["a", "b", "c"], ["c"]) == pytest.approx(1 / 3)
    assert reciprocal_rank(["a"], ["z"]) == 0.0
    assert all_found(["a", "b", "c"], ["a", "c"], 3) and not all_found(["a", "b", "c"], ["a", "c"], 2)


@pytest.mark.parametrize("q", [0, 5, 50, 95, 99, 100])
def test_percentile_matches_numpy(q):
    xs = [5.0, 1.0, 3.0, 10.0, 7.5, 2.2]
    assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))
