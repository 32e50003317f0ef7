"""The background a question's dense scores are judged against (retrieval/signals.py)."""

from __future__ import annotations

import zlib

import numpy as np

import retrieval.signals as signals
from retrieval.signals import HitScorer
from retrieval.types import Filters, Principal


class ArrayVectors:
    """Stored vectors from an array, so a test can change the ones nobody may read."""

    def __init__(self, vectors: np.ndarray) -> None:
        self.array = vectors

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        return self.array[rows]


def stats(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = vectors.astype(np.float64)
    mean = x.mean(axis=0)
    return mean, x.T @ x / len(x) - np.outer(mean, mean)


def test_a_scope_background_is_exact_within_its_row_budget_then_sampled_by_chunk_id_among_allowed_rows(engine, monkeypatch):
    snapshot = engine.snapshot
    stored = snapshot.dense.vectors(np.arange(snapshot.dense.size, dtype=np.int64))
    reader = Principal("someone", ()).access_scope()  # reads the public documents only
    allowed = snapshot.chunks.mask(reader, Filters())
    rows = np.flatnonzero(allowed)
    assert 5 < len(rows) < len(allowed)

    def background(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return HitScorer(snapshot.bm25, ArrayVectors(vectors), engine.embedder.encode_query, snapshot.chunks)._background(
            reader, allowed)

    monkeypatch.setattr(signals, "BACKGROUND_ROWS", len(rows))
    mean, cov = background(stored)
    want_mean, want_cov = stats(stored[rows])
    np.testing.assert_allclose(mean, want_mean, atol=1e-6)
    np.testing.assert_allclose(cov, want_cov, atol=1e-6)

    budget = max(2, len(rows) // 3)
    monkeypatch.setattr(signals, "BACKGROUND_ROWS", budget)
    mean, cov = background(stored)
    # the rows whose chunk id's CRC-32 falls under budget / readable of the 32-bit space
    chosen = [r for r in rows if zlib.crc32(snapshot.chunks.chunk_ids[r].encode()) < (1 << 32) * budget // len(rows)]
    assert 0 < len(chosen) < len(rows)
    want_mean, want_cov = stats(stored[chosen])
    np.testing.assert_allclose(mean, want_mean, atol=1e-6)
    np.testing.assert_allclose(cov, want_cov, atol=1e-6)
    other = stored.copy()
    other[~allowed] = np.random.default_rng(0).standard_normal((int((~allowed).sum()), stored.shape[1]))
    again = background(other)  # forbidden chunks' vectors changed: the sample and its statistics do not
    assert np.array_equal(again[0], mean) and np.array_equal(again[1], cov)
