"""The query fast path must give the very vectors `encode` gives (the index was built with it)."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.mark.parametrize("text", ["What does error E4012 mean?", "x", "Ünïcødé ﬁle naïve café " * 60, "   "])
def test_query_vector_equals_the_batch_encoder(embedder, text):
    embedder.clear_cache()
    fast = embedder.encode_query(text)
    slow = embedder.load()._model.encode([text], normalize_embeddings=True, convert_to_numpy=True)
    assert fast.shape == (1, embedder.dim) and fast.dtype == np.float32
    assert np.allclose(fast, slow, atol=1e-6)
    assert np.allclose(embedder.encode([text]), fast, atol=1e-6)
