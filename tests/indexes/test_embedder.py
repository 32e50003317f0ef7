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


def test_the_pytorch_fallback_gives_the_same_vectors(embedder):
    plain = Embedder(query_runtime="torch").load()
    assert plain.query_backend == "torch"
    for text in TEXTS:
        assert np.allclose(plain.encode_query(text), embedder.encode_query(text), atol=1e-6)


@pytest.mark.slow
def test_a_broken_cached_export_is_replaced(tmp_path):
    first = Embedder(cache_dir=tmp_path)
    assert first.query_backend == "onnxruntime"
    (exported,) = (tmp_path / "onnx").glob("*.onnx")
    assert exported.stat().st_mode & 0o777 == 0o644
    exported.write_bytes(b"not a model")
    again = Embedder(cache_dir=tmp_path)
    assert again.query_backend == "onnxruntime" and exported.stat().st_size > 1_000_000
    assert np.allclose(again.encode_query(TEXTS[0]), first.encode_query(TEXTS[0]), atol=1e-6)


def test_settings_choose_the_query_runtime(tmp_path):
    from routes.service.settings import Settings

    settings = Settings.load({"QUARRY_ONNX": "0", "QUARRY_CACHE_DIR": str(tmp_path)})
    assert settings.onnx is False and settings.cache_dir == tmp_path
    assert settings.embedder().query_backend == "torch"


def test_a_passage_vector_does_not_depend_on_its_neighbours(embedder):
    """Batches hold one token length each, so a passage's vector is the one it gets alone:
    the passages embedded beside it (forbidden ones included) cannot move its scores."""
    words = "the ledger holds north south amounts shipped open held orders calendar notes".split()
    texts = [" ".join(words[(i * 7 + j) % len(words)] for j in range(3 + i * 11)) for i in range(40)] + ["  spaced  ", ""]
    model = embedder.load()._model
    alone = np.stack([model.encode([t], batch_size=1, normalize_embeddings=True, convert_to_numpy=True) for t in texts])[:, 0]
    together = embedder.encode(texts)
    assert np.array_equal(together, alone)
    assert np.array_equal(embedder.encode(texts[::3]), alone[::3])


def test_a_batch_of_long_passages_is_cut_by_tokens():
    from indexes.embedder import MAX_BATCH_TOKENS, _same_length_batches

    batches = _same_length_batches([256] * 100 + [8] * 100 + [256], batch_size=64)
    assert sorted(i for b in batches for i in b) == list(range(201))
    assert all(len(b) * n <= MAX_BATCH_TOKENS for b, n in ((b, 256 if b[0] < 100 or b[0] == 200 else 8) for b in batches))
    assert max(len(b) for b in batches) == 64  # short passages still go 64 at a time
