"""Segments served as one: BM25 over base + delta with summed statistics scores exactly like
one index of the same chunks, for any access mask and either idf."""

from __future__ import annotations

import random

import numpy as np
import pytest

from indexes.bm25_index import Bm25Index, Bm25Params
from indexes.segments import SegmentedBm25

WORDS = ["pump", "valve", "seal", "torque", "gasket", "flange", "rotor", "stator", "bearing", "coupling",
         "impeller", "casing", "shaft", "vane", "nozzle", "filter", "strainer", "manifold"]


def _texts(rng: random.Random, n: int) -> list[str]:
    return [" ".join(rng.choices(WORDS, k=rng.randint(3, 14))) for _ in range(n)]


@pytest.mark.parametrize("method", ["lucene", "robertson"])
def test_segmented_bm25_equals_one_index_of_the_same_chunks(method):
    rng = random.Random(4)
    params = Bm25Params(method=method)
    base_texts, delta_texts = _texts(rng, 40), _texts(rng, 3)  # a tiny delta: df > N/2 for most of its terms
    # The reference keeps every term frequency (stored with Lucene's idf, which is never 0).
    whole = Bm25Index.build(base_texts + delta_texts, params, storage="lucene")
    base = Bm25Index.build(base_texts, params)  # as a snapshot stores it
    parts = SegmentedBm25([base, Bm25Index.build(delta_texts, params, storage="lucene")], np.ones(43, dtype=bool))
    # Robertson's stored idf is 0 for a term in more than half of the base's chunks (its tf is
    # lost there, in a rebuild too): queries use the other terms.
    words = [w for w in WORDS if sum(w in t.split() for t in base_texts) <= 20] if method == "robertson" else WORDS
    assert len(words) >= 6
    for _ in range(30):
        allowed = np.asarray([rng.random() < 0.7 for _ in range(43)])
        allowed[rng.randrange(40, 43)] = True
        query = " ".join(rng.sample(words, 3))
        expected = whole.scores_with(query, allowed, whole.collection_stats(query, allowed))
        got = parts.scores(query, allowed)
        assert np.allclose(got[allowed], expected[allowed], atol=1e-5), (query, method)
        assert parts.term_stats(query, allowed) == whole.term_stats(query, allowed)
        rows = np.flatnonzero(allowed)[:10]
        for a, b in zip(parts.evidence(query, rows, allowed), whole.evidence(query, rows, allowed), strict=True):
            assert np.allclose(a, b, atol=1e-5), query
    # Under Robertson a delta stored with its own idf would lose every term in more than half
    # of its chunks; stored with Lucene's, the delta's rows score like the whole index's.
    query = " ".join(delta_texts[0].split()[:2])
    mask = np.ones(43, dtype=bool)
    assert np.allclose(parts.scores(query, mask)[40:], whole.scores_with(query, mask, whole.collection_stats(query, mask))[40:],
                       atol=1e-5)


def test_a_live_shard_scores_and_ranks_with_statistics_spanning_other_shards():
    """A shard of a cluster holding live writes is a segmented index scored with every
    shard's summed statistics: its scores and top k then equal one index of all the shards'
    chunks, restricted to its rows."""
    rng = random.Random(9)
    params = Bm25Params()
    base_texts, delta_texts, other_texts = _texts(rng, 30), _texts(rng, 4), _texts(rng, 25)
    whole = Bm25Index.build(base_texts + delta_texts + other_texts, params, storage="lucene")
    shard = SegmentedBm25([Bm25Index.build(base_texts, params), Bm25Index.build(delta_texts, params, storage="lucene")],
                          np.ones(34, dtype=bool))
    other = Bm25Index.build(other_texts, params)
    for _ in range(20):
        allowed = np.asarray([rng.random() < 0.8 for _ in range(59)])
        query = " ".join(rng.sample(WORDS, 3))
        spanning = shard.collection_stats(query, allowed[:34]) + other.collection_stats(query, allowed[34:])
        assert spanning == whole.collection_stats(query, allowed)
        expected = whole.scores_with(query, allowed, spanning)[:34]
        got = shard.scores_with(query, allowed[:34], spanning)
        assert np.allclose(got[allowed[:34]], expected[allowed[:34]], atol=1e-5), query
        rows, scores = shard.top_k(query, allowed[:34], 5, stats=spanning)
        best = np.argsort(-np.where(allowed[:34], expected, -np.inf), kind="stable")[:len(rows)]
        assert np.allclose(scores, expected[best], atol=1e-5) and set(rows) <= set(np.flatnonzero(allowed[:34]))
        for word in query.split():
            (term,) = shard.tokenize(word)
            assert set(shard.postings(term)) == {i for i, t in enumerate(base_texts + delta_texts) if word in t.split()}
