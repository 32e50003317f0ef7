"""Query vectors must be the vectors the index was built with: the onnxruntime query path and
the PyTorch fallback both agree with `encode` (the batch path that embedded every passage)."""

from __future__ import annotations

import numpy as np
import pytest

from indexes.embedder import Embedder

TEXTS = ["What does error E4012 mean?", "x", "Ünïcødé ﬁle naïve café " * 60, "   "]


@pytest.mark.parametrize("text", TEXTS)
def test_query_vector_equals_the_batch_encoder(embedder, text):
    embedder.clear_cache()
    fast = embedder.encode_query(text)
    slow = embedder.load()._model.encode([text], normalize_embeddings=True, convert_to_numpy=True)
    assert fast.shape == (1, embedder.dim) and fast.dtype == np.float32
    assert np.allclose(fast, slow, atol=1e-6)
    assert np.allclose(embedder.encode([text]), fast, atol=1e-6)


def test_queries_run_on_onnxruntime_here(embedder):
    assert embedder.query_backend == "onnxruntime"


def test_the_pytorch_fallback_gives_the_same_vectors(embedder, monkeypatch):
    monkeypatch.setenv("QUARRY_ONNX", "0")
    plain = Embedder().load()
    assert plain.query_backend == "torch"
    for text in TEXTS:
        assert np.allclose(plain.encode_query(text), embedder.encode_query(text), atol=1e-6)
